package limit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the shared limits' collectors (docs/metrics-and-alerts.md).
type Metrics struct {
	// RateLimitFallback counts decisions made locally while Redis failed; caller.
	RateLimitFallback *prometheus.CounterVec
	// RateLimitBackendUp has no labels; it is a vector so that it has no
	// series (rather than a misleading 0) until a Redis limiter decides.
	RateLimitBackendUp *prometheus.GaugeVec
	BudgetUsedRatio    *prometheus.GaugeVec // limit, route ("" for tenant scope)
	// BudgetUsedAt is when each BudgetUsedRatio was last set (a decision
	// on its window): the ratio is as of then, and an alert reads it only
	// while it is fresh, so that a window nobody asks about keeps no
	// alert firing once traffic stops.
	BudgetUsedAt *prometheus.GaugeVec // limit, route
	// BudgetSpent counts the requests admitted under each limit, by
	// caller: who spends the vendor's budget.
	BudgetSpent    *prometheus.CounterVec // caller, limit
	BudgetFallback prometheus.Counter     // decisions made locally while Redis was unreachable
	// BudgetWaiting is the requests waiting now for a hold or a limit
	// (upstream_budget.max_wait); the Waitlist keeps it.
	BudgetWaiting prometheus.Gauge
	// BudgetMaxWait and BudgetMaxWaiting are upstream_budget.max_wait and
	// max_waiting in force (SetWaitSettings), so that an alert can compare
	// the waits with them whatever each release configured.
	BudgetMaxWait    prometheus.Gauge
	BudgetMaxWaiting prometheus.Gauge
	// BudgetRefused counts requests refused upstream_budget_exhausted;
	// caller, limit.
	BudgetRefused *prometheus.CounterVec
	// BudgetWait is the time waited by requests then admitted; caller.
	BudgetWait *prometheus.HistogramVec
	// BudgetWaitEvicted counts waiters that gave their place up to a
	// request of a caller with fewer waiters, and got their 429 at once.
	BudgetWaitEvicted prometheus.Counter
	// UpstreamThrottled counts the upstream's 429 answers; route.
	UpstreamThrottled *prometheus.CounterVec
}

// waitBuckets span a wait for the next slot of a busy window (tens of
// milliseconds) to the longest max_wait a default drain allows (30 s) and
// beyond.
var waitBuckets = []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120}

// NewMetrics creates the shared limits' collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		RateLimitFallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_rate_limit_fallback_total",
			Help: "Rate-limit decisions made locally at rps / replicas_hint because Redis was unreachable or slow (rate_limit.backend: redis), by caller.",
		}, []string{"caller"}),
		RateLimitBackendUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_rate_limit_backend_up",
			Help: "1 while this replica's rate limits are decided in Redis, 0 while it limits locally because Redis is unreachable; absent with rate_limit.backend: local.",
		}, nil),
		BudgetUsedRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_upstream_budget_used_ratio",
			Help: "Used fraction of an upstream_budget limit's sliding window as of its last decision, by limit and route (\"\" for tenant scope).",
		}, []string{"limit", "route"}),
		BudgetUsedAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_upstream_budget_used_ratio_timestamp_seconds",
			Help: "When faxgate_upstream_budget_used_ratio of the same limit and route was last set (Unix seconds): its value is as of then.",
		}, []string{"limit", "route"}),
		BudgetSpent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_budget_spent_total",
			Help: "Requests admitted to the upstream and counted against an upstream_budget limit, by caller and limit.",
		}, []string{"caller", "limit"}),
		BudgetFallback: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "faxgate_upstream_budget_fallback_total",
			Help: "Upstream budget decisions made locally (requests / replicas_hint) because Redis was unreachable or slow.",
		}),
		BudgetWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_upstream_budget_waiting",
			Help: "Requests waiting now on this replica for a Retry-After hold to end or an upstream_budget limit to free a slot (upstream_budget.max_wait).",
		}),
		BudgetMaxWait: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_upstream_budget_max_wait_seconds",
			Help: "upstream_budget.max_wait in force: the longest a request waits for a hold or a limit (0: refused at once).",
		}),
		BudgetMaxWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "faxgate_upstream_budget_max_waiting",
			Help: "upstream_budget.max_waiting in force: the most requests waiting at once on this replica.",
		}),
		BudgetRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_budget_refused_total",
			Help: "Requests refused with 429 upstream_budget_exhausted, by caller and the limit that refused.",
		}, []string{"caller", "limit"}),
		BudgetWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "faxgate_upstream_budget_wait_seconds",
			Help:    "Time waited for a hold or an upstream_budget limit by requests that were then admitted, by caller.",
			Buckets: waitBuckets,
		}, []string{"caller"}),
		BudgetWaitEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "faxgate_upstream_budget_wait_evicted_total",
			Help: "Waiting requests that gave their place up, with max_waiting reached, to a request of a caller with fewer waiters, and got their 429 at once.",
		}),
		UpstreamThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_upstream_throttled_total",
			Help: "Upstream 429 answers seen, by route; each one, with upstream_budget.honor_retry_after, holds the route.",
		}, []string{"route"}),
	}
	reg.MustRegister(m.RateLimitFallback, m.RateLimitBackendUp, m.BudgetUsedRatio, m.BudgetUsedAt, m.BudgetSpent, m.BudgetFallback,
		m.BudgetWaiting, m.BudgetMaxWait, m.BudgetMaxWaiting, m.BudgetRefused, m.BudgetWait, m.BudgetWaitEvicted,
		m.UpstreamThrottled)
	return m
}

// StartSeries creates at 0 the series of the admission's counters that an
// alert or a dashboard panel selects, for the label values the rules make
// known (docs/metrics-and-alerts.md, Series from the start): every route's
// throttled count, every caller's refusals and spending by limit and, with
// waiting on, its waits. Called whenever rules are applied, never by a
// request; callers or limits a reload removes keep their series.
func (m *Metrics) StartSeries(callers, routes []string, r *UpstreamRules) {
	for _, route := range routes {
		m.UpstreamThrottled.WithLabelValues(route)
	}
	for _, c := range callers {
		for _, l := range r.Limits {
			m.BudgetRefused.WithLabelValues(c, l)
			m.BudgetSpent.WithLabelValues(c, l)
		}
		if r.MaxWait > 0 {
			m.BudgetWait.WithLabelValues(c)
		}
	}
}

// SetWaitSettings records the upstream_budget.max_wait and max_waiting in
// force; the assembler calls it whenever rules are applied.
func (m *Metrics) SetWaitSettings(maxWait time.Duration, maxWaiting int) {
	m.BudgetMaxWait.Set(maxWait.Seconds())
	m.BudgetMaxWaiting.Set(float64(maxWaiting))
}

// observeWindow records a decision's view of limit's window for route: its
// used ratio, and when that was.
func (m *Metrics) observeWindow(limit, route string, ratio float64, at time.Time) {
	m.BudgetUsedRatio.WithLabelValues(limit, route).Set(ratio)
	m.BudgetUsedAt.WithLabelValues(limit, route).Set(float64(at.UnixMilli()) / 1000)
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
