package gateway

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/servertls"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// Metrics are every part's collectors, each created by the package whose
// behaviour it counts, on the one registry of Deps.Registry; and the
// process's own: its build and its configuration.
type Metrics struct {
	Proxy  *proxy.Metrics
	Tokens *tokencache.Metrics
	Limits *limit.Metrics
	TLS    *servertls.Metrics
	Redis  *redisconn.Metrics

	BuildInfo             *prometheus.GaugeVec   // version, revision, goversion
	ConfigReload          *prometheus.CounterVec // result: ok, error
	ConfigLastReload      prometheus.Gauge
	ConfigLastReloadOK    prometheus.Gauge // 1 after a successful load, 0 after a failed reload
	ConfigRestartRequired prometheus.Gauge
	BackgroundPanics      *prometheus.CounterVec // loop: backgroundLoops
}

// backgroundLoops are the names of the loops whose panics are recovered
// (internal/base/background), the loop label values of
// faxgate_background_panics_total: each exists at 0 from the start, so that
// FaxgateBackgroundLoopPanicked fires on the first panic.
// TestBackgroundLoopsAreKnown keeps the list and the code in step.
var backgroundLoops = []string{"config_reload", "key_watch", "proxy_auth_reload", "redis_topology", "tls_acme_metrics", "tls_cert_watch",
	"token_lease", "token_renewal", "token_updates", "upstream_hold_poll", "upstream_hold_publish"}

// newMetrics creates every collector and registers it on reg.
func newMetrics(reg prometheus.Registerer, version, revision string) *Metrics {
	if revision == "" {
		revision = "unknown"
	}
	m := &Metrics{
		Proxy:  proxy.NewMetrics(reg),
		Tokens: tokencache.NewMetrics(reg),
		Limits: limit.NewMetrics(reg),
		TLS:    servertls.NewMetrics(reg),
		Redis:  redisconn.NewMetrics(reg),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_build_info",
			Help: "Always 1; labels carry the faxgate version, the git revision it was built from and the Go version it was built with.",
		}, []string{"version", "revision", "goversion"}),
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
		BackgroundPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_background_panics_total",
			Help: "Panics recovered in a background loop, by loop; the loop carries on (the \"background loop panicked\" log line has the stack).",
		}, []string{"loop"}),
	}
	reg.MustRegister(m.BuildInfo, m.ConfigReload, m.ConfigLastReload, m.ConfigLastReloadOK, m.ConfigRestartRequired,
		m.BackgroundPanics)
	m.BuildInfo.WithLabelValues(version, revision, runtime.Version()).Set(1)
	for _, r := range []string{"ok", "error"} {
		m.ConfigReload.WithLabelValues(r) // present at 0 for rate() and alerts
	}
	for _, l := range backgroundLoops {
		m.BackgroundPanics.WithLabelValues(l)
	}
	return m
}

// countPanic is the background.Counter every loop of the gateway is given.
func (m *Metrics) countPanic(loop string) { m.BackgroundPanics.WithLabelValues(loop).Inc() }

// rulesApplied brings the metrics that follow the rules up to date, at
// start and on every reload: the waiting settings in force, and the
// admission's series at 0 for the callers, routes and limits they name
// (docs/metrics-and-alerts.md, Series from the start). The request path's
// own series are the handler's (proxy.Handler.SetRules).
func (m *Metrics) rulesApplied(r *policy.Rules) {
	m.Limits.SetWaitSettings(r.Upstream.MaxWait, r.Upstream.MaxWaiting)
	var routes []string
	for _, name := range r.Table.RouteNames() {
		if name != route.RouteAuth { // answered by the gateway, never forwarded
			routes = append(routes, name)
		}
	}
	m.Limits.StartSeries(r.Policy.Callers(), routes, &r.Upstream)
}

// registerReady exports faxgate_ready: 1 while /readyz would answer 200, 0
// otherwise, read at scrape time from ready (which must not block). It lets
// an alert tell "up but not ready" from "down".
func registerReady(reg prometheus.Registerer, ready func() bool) {
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
