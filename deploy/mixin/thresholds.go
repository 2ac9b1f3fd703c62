package mixin

import "github.com/faxgate/faxgate/policy/routetable"

// The numbers the alerts fire at. The dashboard's panels draw the same ones
// as their thresholds, so a panel turns red where its alert fires.
const (
	// The token lives 24 h and is renewed when token.refresh_before (1 h by
	// default, plus up to a quarter of it in jitter) remains, so a healthy
	// token never has less than about 45 minutes left. A ticket at 45
	// minutes left (a quarter of an hour after renewal was due), a page at
	// 30 (half an hour to fix it before callers see 503).
	tokenTicketSeconds = 45 * 60
	tokenPageSeconds   = 30 * 60

	// minRequests is the traffic in 5 minutes below which no ratio alert
	// fires: 1 failure in 3 requests is not an outage.
	minRequests = 50
	// upstreamErrorRatio of a route's requests in 5xx is degraded service;
	// upstreamFailingRatio of all of them means callers fail.
	upstreamErrorRatio   = 0.05
	upstreamFailingRatio = 0.5
	// upstreamSlowSeconds is the p99 of upstream response time (uploads
	// aside) that is slow.
	upstreamSlowSeconds = 5
	// rateLimitedRatio of a caller's requests refused 429 rate_limited.
	rateLimitedRatio = 0.1
	// budgetUsedRatio of an upstream budget window in use.
	budgetUsedRatio = 0.9
	// throttledPer15m vendor 429s on a route in 15 minutes, or a hold
	// longer than holdSeconds.
	throttledPer15m = 3
	holdSeconds     = 120
	// resendsPer15m 401 resends on a route in 15 minutes.
	resendsPer15m = 10
	// The TLS certificate's days left: a ticket, then a page.
	certTicketDays = 14
	certPageDays   = 3
	// waitNearMax: the 90th percentile of the time admitted requests
	// waited for the upstream budget is over this share of
	// upstream_budget.max_wait, with at least minWaits waits in 10 minutes:
	// the queue is nearly as long as callers may wait, and the next
	// requests will be refused.
	waitNearMax = 0.8
	minWaits    = 20
	// notReadyFraction: FaxgateDown fires when fewer than this share of a
	// release's targets answer a scrape (one replica restarting is not).
	upFraction = 0.5
)

// uploadRoutes are the routes whose requests carry documents (faxes.send,
// an extra route in config.example.yaml, and the built-in patient document
// upload). They take seconds to minutes by nature, so the latency alert
// leaves them out and the dashboard shows them apart.
const uploadRoutes = "faxes.send|" + routetable.ContactsUploadPatientDoc
