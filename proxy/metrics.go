package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/policy/routetable"
)

// Metrics are the request path's collectors (docs/metrics-and-alerts.md).
// Label values are only ever a configured caller name (or "unidentified"), a
// route name (or "unmatched"), an HTTP method the gateway forwards (or
// "other"), a status code or a fixed word: never a token, address, path or
// ID.
type Metrics struct {
	Requests         *prometheus.CounterVec   // caller, route, method, code
	RequestDuration  *prometheus.HistogramVec // caller, route
	UpstreamDuration *prometheus.HistogramVec // route
	Denied           *prometheus.CounterVec   // caller, route, reason
	RateLimited      *prometheus.CounterVec   // caller
	Inflight         prometheus.Gauge
	// Upstream401Retries counts requests resent after a 401; route.
	Upstream401Retries *prometheus.CounterVec
	// Upstream401Unretried counts 401s relayed because the body could not be
	// resent (streamed without a copy); route.
	Upstream401Unretried       *prometheus.CounterVec
	UpstreamRateLimitRemaining *prometheus.GaugeVec // route: the last X-RateLimit-Remaining
	// UpstreamRetries counts requests sent again for a reason other than a
	// 401: unsent (the upstream never received it), reset (a bodiless GET
	// whose connection broke off), throttled (a vendor 429 waited out);
	// route, reason.
	UpstreamRetries *prometheus.CounterVec
	// UpstreamProxyErrors counts the egress proxy's failures: unreachable,
	// auth (407), refused; reason. Series only with a proxy configured.
	UpstreamProxyErrors *prometheus.CounterVec
	// ShadowDecisions counts a shadow candidate's decisions beside the
	// live ones; caller (as the live rules name it), route, live,
	// candidate (allowed, or an error code).
	ShadowDecisions *prometheus.CounterVec
	// ShadowSkipped counts the candidate decisions skipped because too
	// many were running beside the requests already.
	ShadowSkipped prometheus.Counter

	// retries mirror faxgate_upstream_retries_total by reason, all routes
	// together, for the status page.
	retries [3]atomic.Uint64
}

// retried counts one resend of route for reason.
func (m *Metrics) retried(route, reason string) {
	m.UpstreamRetries.WithLabelValues(route, reason).Inc()
	for i, r := range retryReasons {
		if r == reason {
			m.retries[i].Add(1)
		}
	}
}

// retryReasons are faxgate_upstream_retries_total's reasons, in the order
// of Metrics.retries.
var retryReasons = [3]string{retryUnsent, retryReset, retryThrottled}

// Retries returns the resends since the start, by reason.
func (h *Handler) Retries() map[string]uint64 {
	out := make(map[string]uint64, len(retryReasons))
	for i, r := range retryReasons {
		out[r] = h.opts.Metrics.retries[i].Load()
	}
	return out
}

// durationBuckets span a fast cached-token round trip (a millisecond) to the
// upstream timeout's order of magnitude, where fax uploads of several MB live.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// NewMetrics creates the request path's collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_requests_total",
			Help: "Requests answered, by caller, route, method and HTTP status code.",
		}, []string{"caller", "route", "method", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "faxgate_request_duration_seconds",
			Help:    "Time from request arrival to the end of the response, by caller and route.",
			Buckets: durationBuckets,
		}, []string{"caller", "route"}),
		UpstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "faxgate_upstream_duration_seconds",
			Help:    "Time until the upstream's response headers arrived, by route.",
			Buckets: durationBuckets,
		}, []string{"route"}),
		Denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_denied_total",
			Help: "Requests refused by the gateway, by caller, route and error code.",
		}, []string{"caller", "route", "reason"}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_rate_limited_total",
			Help: "Requests refused with 429 by the per-caller rate limit.",
		}, []string{"caller"}),
		Inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_inflight_requests",
			Help: "Requests being served right now.",
		}),
		Upstream401Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_401_retries_total",
			Help: "Requests resent once with a new token after the upstream answered 401.",
		}, []string{"route"}),
		Upstream401Unretried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_401_unretried_total",
			Help: "Upstream 401s relayed to the caller without a resend, because the request body streamed without a copy (over server.resend_buffer_bytes or 1 MiB), by route.",
		}, []string{"route"}),
		UpstreamRateLimitRemaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_upstream_ratelimit_remaining",
			Help: "The last X-RateLimit-Remaining the upstream sent on a route.",
		}, []string{"route"}),
	}
	m.UpstreamRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "faxgate_upstream_retries_total",
		Help: "Requests sent upstream again, by route and reason: unsent (the upstream never received it), reset (a bodiless GET whose connection broke off), throttled (a vendor 429 waited out).",
	}, []string{"route", "reason"})
	m.UpstreamProxyErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "faxgate_upstream_proxy_errors_total",
		Help: "Failures of the egress proxy (upstream.proxy_url), requests and token renewals alike, by reason: unreachable, auth (407), refused.",
	}, []string{"reason"})
	m.ShadowDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "faxgate_shadow_decisions_total",
		Help: "Requests decided by the shadow candidate configuration beside the live one, by caller and route (as the live rules name them) and both outcomes (allowed, or an error code).",
	}, []string{"caller", "route", "live", "candidate"})
	m.ShadowSkipped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "faxgate_shadow_skipped_total",
		Help: "Requests the shadow candidate did not decide because too many of its decisions were running already (its limits ask Redis).",
	})
	reg.MustRegister(m.ShadowDecisions, m.ShadowSkipped)
	reg.MustRegister(m.Requests, m.RequestDuration, m.UpstreamDuration, m.Denied, m.RateLimited, m.Inflight,
		m.Upstream401Retries, m.Upstream401Unretried, m.UpstreamRateLimitRemaining, m.UpstreamRetries, m.UpstreamProxyErrors)
	return m
}

// startSeries creates at 0 every series of the request path's counters that
// an alert or a dashboard panel selects, for the label values r makes known,
// so that increase() and rate() see the first event
// (docs/metrics-and-alerts.md, Series from the start). SetRules calls it, at
// start and on every reload (new callers, routes, limits); never a request.
// Series of callers or routes a reload removed stay, at their counts, until
// the process restarts.
//
// What is selected, not the cross product, so that the count grows with the
// config, never with traffic: with C callers, R forwardable routes (built-in
// and routes.extra, auth excluded, plus unmatched), S sensitive routes and L
// upstream_budget limits,
//
//	faxgate_denied_total{caller,route,reason}          (C+1)·S  (one reason per caller and sensitive route)
//	faxgate_rate_limited_total{caller}                 C
//	faxgate_upstream_401_retries_total{route}          R
//	faxgate_upstream_retries_total{route,reason}       2R (unsent, throttled)
//
// and upstream admission's (limit.Metrics.StartSeries), with L
// upstream_budget limits:
//
//	faxgate_upstream_throttled_total{route}            R
//	faxgate_upstream_budget_refused_total{caller,limit} C·L
//	faxgate_upstream_budget_wait_seconds{caller}       C histograms, with upstream_budget.max_wait > 0
//
// With a shadow candidate in force, faxgate_shadow_decisions_total{caller,
// route,live,candidate} starts at C·R (both outcomes allowed).
//
// 20 callers, 20 route names (R = 20), the one sensitive numbers.delete and
// 2 limits make 21 + 20 + 20 + 40 + 20 + 40 = 161 series; the full cross product
// of faxgate_denied_total alone (21 callers × 20 routes × 19 reasons) would
// be 7,980.
func (m *Metrics) startSeries(r *policy.Rules) {
	if r == nil || r.Policy == nil || r.Table == nil {
		return
	}
	callers := r.Policy.Callers()
	for _, name := range r.Table.RouteNames() {
		if name == route.RouteAuth { // answered by the gateway, never forwarded
			continue
		}
		m.Upstream401Retries.WithLabelValues(name)
		m.UpstreamRetries.WithLabelValues(name, retryUnsent)
		m.UpstreamRetries.WithLabelValues(name, retryThrottled)
		// The sensitive routes (FaxgateSensitiveRouteDenied and its panel
		// select numbers.delete, sensitive by default): for each caller the
		// reason policy itself refuses it with there. Other reasons
		// (rate_limited, upstream_*) have metrics and alerts of their own.
		if !r.Policy.Base(name).Sensitive && name != routetable.NumbersDelete {
			continue
		}
		m.Denied.WithLabelValues(policy.UnidentifiedCaller, name, "unidentified_caller")
		for _, c := range callers {
			switch d := r.Policy.Decide(c, name); {
			case !d.Allowed:
				m.Denied.WithLabelValues(c, name, "forbidden")
			case d.Confirm:
				m.Denied.WithLabelValues(c, name, "confirmation_required")
			}
		}
	}
	for _, c := range callers {
		m.RateLimited.WithLabelValues(c)
	}
}
