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
	// The same as shares of token.refresh_before, which the chart passes
	// in its release's value of (Options.RefreshBefore): 20m makes them 15
	// and 10 minutes.
	tokenTicketShare = 0.75
	tokenPageShare   = 0.5
	// refusedRatio of all requests refused by faxgate itself for reasons
	// that mean it is broken for everyone, not that one caller misbehaves.
	refusedRatio = 0.5

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
	// budgetFreshSeconds: a used ratio older than this (no decision on its
	// window since) is not read; the window may have emptied since.
	budgetFreshSeconds = 300
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
	// proxyFailureWindow is the rate() window of
	// FaxgateUpstreamProxyFailing, shorter than its for: (5m) by more than
	// a scrape interval, so that a single failure never fires it.
	proxyFailureWindow = "3m"
	// upFraction: FaxgateDown fires when fewer than this share of a
	// release's targets answer a scrape (one replica restarting is not),
	// and some still do (none up is FaxgateAbsent's).
	upFraction = 0.5
)

// uploadRoutes are the routes whose requests carry documents (faxes.send,
// an extra route in config.example.yaml, and the built-in patient document
// upload). They take seconds to minutes by nature, so the latency alert
// leaves them out and the dashboard shows them apart.
const uploadRoutes = "faxes.send|" + routetable.ContactsUploadPatientDoc

// massRefusalReasons are the refusals that FaxgateRequestsRefused counts:
// the ones that hit every caller at once when faxgate is misconfigured or
// has no token (docs/metrics-and-alerts.md).
const massRefusalReasons = "unidentified_caller|forbidden|token_unavailable"
