// Package metrics is faxgate's Prometheus surface
// (docs/metrics-and-alerts.md): every metric name and label set lives here,
// registered on a registry the caller owns, never on the global default one.
package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy/routetable"
)

// Metrics holds every collector faxgate exports. Label values are only ever a
// configured caller name (or "unidentified"), a route name (or "unmatched"), an
// HTTP method the gateway forwards (or "other"), a status code or a fixed word,
// as docs/metrics-and-alerts.md promises: never a token, address, path or ID.
type Metrics struct {
	Requests           *prometheus.CounterVec   // caller, route, method, code
	RequestDuration    *prometheus.HistogramVec // caller, route
	UpstreamDuration   *prometheus.HistogramVec // route
	Denied             *prometheus.CounterVec   // caller, route, reason
	RateLimited        *prometheus.CounterVec   // caller
	TokenRefresh       *prometheus.CounterVec   // result: ok, error, invalid_key
	TokenExpiry        prometheus.Gauge
	Upstream401Retries *prometheus.CounterVec // route
	// Upstream401Unretried counts 401s relayed because the body could not be
	// resent (streamed without a copy). route
	Upstream401Unretried *prometheus.CounterVec
	Inflight             prometheus.Gauge
	BuildInfo            *prometheus.GaugeVec // version, goversion

	// Token sharing between replicas (token.store: redis).
	TokenStoreErrors *prometheus.CounterVec // op: load, save, delete, lease, extend, release, subscribe
	TokenAdopted     *prometheus.CounterVec // source: upstream, redis
	TokenLease       *prometheus.CounterVec // result: acquired, busy, lost, error
	TokenUnsynced    prometheus.Gauge

	// Configuration reloads.
	ConfigReload          *prometheus.CounterVec // result: ok, error
	ConfigLastReload      prometheus.Gauge
	ConfigLastReloadOK    prometheus.Gauge // 1 after a successful load, 0 after a failed reload
	ConfigRestartRequired prometheus.Gauge

	// Shared rate limits (rate_limit.backend: redis).
	RateLimitFallback *prometheus.CounterVec // caller
	// RateLimitBackendUp has no labels; it is a vector so that it has no
	// series (rather than a misleading 0) until a Redis limiter decides.
	RateLimitBackendUp *prometheus.GaugeVec

	// TLS on the proxy listener (server.tls).
	TLSCertExpiry      *prometheus.GaugeVec   // domain: the certificate's first DNS name
	TLSHandshakeErrors *prometheus.CounterVec // reason: HandshakeReasons
	TLSACMEFailures    *prometheus.CounterVec // domain (from config), op: obtain, renew

	// The upstream budget (upstream_budget, docs/upstream-budget.md).
	UpstreamThrottled          *prometheus.CounterVec // route: upstream 429s seen
	UpstreamRateLimitRemaining *prometheus.GaugeVec   // route: the last X-RateLimit-Remaining
	BudgetUsedRatio            *prometheus.GaugeVec   // limit, route ("" for tenant scope)
	BudgetRefused              *prometheus.CounterVec // caller, limit
	BudgetFallback             prometheus.Counter     // decisions made locally while Redis was unreachable
}

// HandshakeReasons are the reason label values of
// faxgate_tls_handshake_errors_total (docs/metrics-and-alerts.md).
var HandshakeReasons = []string{"no_client_cert", "bad_client_cert", "protocol", "other"}

// durationBuckets span a fast cached-token round trip (a millisecond) to the
// upstream timeout's order of magnitude, where fax uploads of several MB live.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer, version string) *Metrics {
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
		TokenRefresh: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_token_refresh_total",
			Help: "Calls to the upstream token endpoint, by result (ok, error, invalid_key).",
		}, []string{"result"}),
		TokenExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_token_expiry_timestamp_seconds",
			Help: "Unix time at which the current Bearer token expires; 0 when none is held.",
		}),
		Upstream401Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_401_retries_total",
			Help: "Requests resent once with a new token after the upstream answered 401.",
		}, []string{"route"}),
		Upstream401Unretried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_401_unretried_total",
			Help: "Upstream 401s relayed to the caller without a resend, because the request body streamed without a copy (over server.resend_buffer_bytes or 1 MiB), by route.",
		}, []string{"route"}),
		Inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_inflight_requests",
			Help: "Requests being served right now.",
		}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_build_info",
			Help: "Always 1; labels carry the faxgate version and the Go version it was built with.",
		}, []string{"version", "goversion"}),
		TokenStoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_token_store_errors_total",
			Help: "Failed operations on the shared token store (Redis), by operation.",
		}, []string{"op"}),
		TokenAdopted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_token_adopted_total",
			Help: "Tokens this replica took into use, by where they came from: renewed here (upstream) or read from the shared store (redis).",
		}, []string{"source"}),
		TokenLease: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_token_lease_total",
			Help: "Attempts at the fleet-wide renewal lease, by result (acquired, busy, lost, error).",
		}, []string{"result"}),
		TokenUnsynced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_token_store_unsynced",
			Help: "1 while this replica holds a token renewed during a shared-store outage and not yet written back.",
		}),
		ConfigReload: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_config_reload_total",
			Help: "Configuration reloads (SIGHUP or file change), by result (ok, error).",
		}, []string{"result"}),
		ConfigLastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful configuration load (start-up or reload).",
		}),
		ConfigLastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_config_last_reload_successful",
			Help: "1 when the last configuration load (start-up or reload) succeeded, 0 while the file on disk has failed to load since.",
		}),
		ConfigRestartRequired: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_config_restart_required",
			Help: "1 when the file on disk changes settings that only a restart applies (listen addresses, upstream, token store ...).",
		}),
		RateLimitFallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_rate_limit_fallback_total",
			Help: "Rate-limit decisions made locally at rps / replicas_hint because Redis was unreachable or slow (rate_limit.backend: redis), by caller.",
		}, []string{"caller"}),
		RateLimitBackendUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_rate_limit_backend_up",
			Help: "1 while this replica's rate limits are decided in Redis, 0 while it limits locally because Redis is unreachable; absent with rate_limit.backend: local.",
		}, nil),
		TLSCertExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_tls_certificate_expiry_timestamp_seconds",
			Help: "Unix time at which the certificate served on the proxy listener expires, by its first DNS name.",
		}, []string{"domain"}),
		TLSHandshakeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_tls_handshake_errors_total",
			Help: "Failed TLS handshakes on the proxy listener, by reason (no_client_cert, bad_client_cert, protocol, other).",
		}, []string{"reason"}),
		TLSACMEFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_tls_acme_failures_total",
			Help: "Failed ACME attempts to obtain or renew the proxy listener's certificate, by configured domain and op (obtain, renew); certmagic retries with backoff.",
		}, []string{"domain", "op"}),
	}
	m.UpstreamThrottled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "faxgate_upstream_throttled_total",
		Help: "Upstream 429 answers seen, by route; each one, with upstream_budget.honor_retry_after, holds the route.",
	}, []string{"route"})
	m.UpstreamRateLimitRemaining = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "faxgate_upstream_ratelimit_remaining",
		Help: "The last X-RateLimit-Remaining the upstream sent on a route.",
	}, []string{"route"})
	m.BudgetUsedRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "faxgate_upstream_budget_used_ratio",
		Help: "Used fraction of an upstream_budget limit's sliding window as of its last decision, by limit and route (\"\" for tenant scope).",
	}, []string{"limit", "route"})
	m.BudgetRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "faxgate_upstream_budget_refused_total",
		Help: "Requests refused with 429 upstream_budget_exhausted, by caller and the limit that refused.",
	}, []string{"caller", "limit"})
	m.BudgetFallback = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "faxgate_upstream_budget_fallback_total",
		Help: "Upstream budget decisions made locally (requests / replicas_hint) because Redis was unreachable or slow.",
	})
	reg.MustRegister(m.UpstreamThrottled, m.UpstreamRateLimitRemaining, m.BudgetUsedRatio, m.BudgetRefused, m.BudgetFallback)
	reg.MustRegister(m.TLSCertExpiry, m.TLSHandshakeErrors, m.TLSACMEFailures)
	reg.MustRegister(m.TokenStoreErrors, m.TokenAdopted, m.TokenLease, m.TokenUnsynced,
		m.ConfigReload, m.ConfigLastReload, m.ConfigLastReloadOK, m.ConfigRestartRequired, m.RateLimitFallback, m.RateLimitBackendUp)
	reg.MustRegister(m.Requests, m.RequestDuration, m.UpstreamDuration, m.Denied,
		m.RateLimited, m.TokenRefresh, m.TokenExpiry, m.Upstream401Retries, m.Upstream401Unretried, m.Inflight, m.BuildInfo)
	m.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	// Present at 0 so rate() and alerts work from the start.
	for _, r := range []string{"ok", "error", "invalid_key"} {
		m.TokenRefresh.WithLabelValues(r)
	}
	for _, s := range []string{"upstream", "redis"} {
		m.TokenAdopted.WithLabelValues(s)
	}
	for _, r := range []string{"ok", "error"} {
		m.ConfigReload.WithLabelValues(r)
	}
	return m
}

// RegisterReady exports faxgate_ready: 1 while /readyz would answer 200, 0
// otherwise, read at scrape time from ready (which must not block). It lets an
// alert tell "up but not ready" from "down".
func RegisterReady(reg prometheus.Registerer, ready func() bool) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "faxgate_ready",
		Help: "1 while the gateway is ready (GET /readyz answers 200: config loaded, a valid token held, a certificate in hand with TLS, not draining), else 0.",
	}, func() float64 {
		if ready() {
			return 1
		}
		return 0
	}))
}

// RegisterHolds exports faxgate_upstream_hold_seconds{route}: the time left
// on each route's Retry-After hold, read at scrape time from each, which
// calls yield for every route held at least once (0 once its hold ended).
func RegisterHolds(reg prometheus.Registerer, each func(yield func(route string, left float64))) {
	reg.MustRegister(&holdCollector{each: each, desc: prometheus.NewDesc("faxgate_upstream_hold_seconds",
		"Seconds left on the Retry-After hold of a route after an upstream 429 (0 when none); present from a route's first hold on.",
		[]string{"route"}, nil)})
}

type holdCollector struct {
	desc *prometheus.Desc
	each func(yield func(route string, left float64))
}

func (c *holdCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *holdCollector) Collect(ch chan<- prometheus.Metric) {
	c.each(func(route string, left float64) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, left, route)
	})
}

// Method maps an HTTP method to its label value: one of the methods the
// gateway forwards (routetable.Methods), or "other", so a caller cannot mint
// label values.
func Method(m string) string {
	if routetable.IsMethod(m) {
		return m
	}
	return "other"
}

// Code is the label value for an HTTP status code, without allocating;
// anything outside 0 to 599 is "other", so the label's values stay bounded.
func Code(status int) string {
	if status >= 0 && status < 600 {
		return ascii.Itoa(int64(status))
	}
	return "other"
}
