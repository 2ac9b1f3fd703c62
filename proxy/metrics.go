package proxy

import "github.com/prometheus/client_golang/prometheus"

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
	UpstreamThrottled          *prometheus.CounterVec // route: upstream 429s seen
	UpstreamRateLimitRemaining *prometheus.GaugeVec   // route: the last X-RateLimit-Remaining
	BudgetRefused              *prometheus.CounterVec // caller, limit
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
		UpstreamThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_throttled_total",
			Help: "Upstream 429 answers seen, by route; each one, with upstream_budget.honor_retry_after, holds the route.",
		}, []string{"route"}),
		UpstreamRateLimitRemaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_upstream_ratelimit_remaining",
			Help: "The last X-RateLimit-Remaining the upstream sent on a route.",
		}, []string{"route"}),
		BudgetRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_budget_refused_total",
			Help: "Requests refused with 429 upstream_budget_exhausted, by caller and the limit that refused.",
		}, []string{"caller", "limit"}),
	}
	reg.MustRegister(m.Requests, m.RequestDuration, m.UpstreamDuration, m.Denied, m.RateLimited, m.Inflight,
		m.Upstream401Retries, m.Upstream401Unretried, m.UpstreamThrottled, m.UpstreamRateLimitRemaining, m.BudgetRefused)
	return m
}
