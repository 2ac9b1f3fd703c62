package tokencache

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the token's collectors (docs/metrics-and-alerts.md).
type Metrics struct {
	Refresh     *prometheus.CounterVec // result: ok, error, invalid_key
	Expiry      prometheus.Gauge
	StoreErrors *prometheus.CounterVec // op: load, save, delete, lease, extend, release, subscribe
	Adopted     *prometheus.CounterVec // source: upstream, redis
	Lease       *prometheus.CounterVec // result: acquired, busy, lost, error
	Unsynced    prometheus.Gauge
}

// NewMetrics creates the token's collectors and registers them on reg. The
// refresh results and adoption sources exist at 0 from the start, so that
// rate() and the alerts see the first event.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Refresh: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_token_refresh_total",
			Help: "Calls to the upstream token endpoint, by result (ok, error, invalid_key).",
		}, []string{"result"}),
		Expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_token_expiry_timestamp_seconds",
			Help: "Unix time at which the current Bearer token expires; 0 when none is held.",
		}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_token_store_errors_total",
			Help: "Failed operations on the shared token store (Redis), by operation.",
		}, []string{"op"}),
		Adopted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_token_adopted_total",
			Help: "Tokens this replica took into use, by where they came from: renewed here (upstream) or read from the shared store (redis).",
		}, []string{"source"}),
		Lease: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_token_lease_total",
			Help: "Attempts at the fleet-wide renewal lease, by result (acquired, busy, lost, error).",
		}, []string{"result"}),
		Unsynced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_token_store_unsynced",
			Help: "1 while this replica holds a token renewed during a shared-store outage and not yet written back.",
		}),
	}
	reg.MustRegister(m.Refresh, m.Expiry, m.StoreErrors, m.Adopted, m.Lease, m.Unsynced)
	for _, r := range []string{"ok", "error", "invalid_key"} {
		m.Refresh.WithLabelValues(r)
	}
	for _, s := range []string{"upstream", "redis"} {
		m.Adopted.WithLabelValues(s)
	}
	return m
}

// StoreOps are the op label values of faxgate_token_store_errors_total.
var StoreOps = []string{"load", "save", "delete", "lease", "extend", "release", "subscribe"}

// StartStore creates at 0 the series of the shared token store's counters
// (every op's errors, every lease result), for a gateway whose token.store
// is redis: FaxgateTokenStoreErrors and the Redis panels then see the first
// error (docs/metrics-and-alerts.md, Series from the start). Without a
// shared store they stay absent, not a misleading 0.
func (m *Metrics) StartStore() {
	for _, op := range StoreOps {
		m.StoreErrors.WithLabelValues(op)
	}
	for _, r := range []string{"acquired", "busy", "lost", "error"} {
		m.Lease.WithLabelValues(r)
	}
}
