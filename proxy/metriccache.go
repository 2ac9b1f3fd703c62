package proxy

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/metrics"
)

// A label lookup (WithLabelValues) hashes and validates every label value
// and takes the vector's lock, four times per request. The children a
// request updates are looked up once per (caller, route) instead and kept
// here, one cache per rules generation: SetRules starts a new one, so the
// cache holds only pairs of the configuration in force (and of the requests
// still running under the previous one). The label values are the same
// either way; only the lookup moves.

// pairKey names the children of one caller on one route.
type pairKey struct{ caller, route string }

// pairMetrics are the metric children of one (caller, route).
type pairMetrics struct {
	caller, route string
	m             *Metrics
	duration      prometheus.Observer // faxgate_request_duration_seconds{caller,route}
	// activity is the caller's ring for the status page (activity.go);
	// nil for a caller outside the rules.
	activity *callerActivity

	// The route's upstream children are looked up on first use, not with
	// the pair: a series appears only once it has something to say (a
	// remaining of 0 before the upstream sent one would be a lie).
	upstreamOnce  sync.Once
	upstream      prometheus.Observer // faxgate_upstream_duration_seconds{route}
	remainingOnce sync.Once
	remaining     prometheus.Gauge // faxgate_upstream_ratelimit_remaining{route}

	requests lockedMap[codeKey, prometheus.Counter] // faxgate_requests_total{caller,route,method,code}
}

type codeKey struct {
	method string
	status int
}

type metricCache struct {
	m        *Metrics
	activity *activityTable
	pairs    lockedMap[pairKey, *pairMetrics]
}

func newMetricCache(m *Metrics, activity *activityTable) *metricCache {
	return &metricCache{m: m, activity: activity}
}

// lockedMap is a map read far more often than written: a read takes the
// read lock only, and a missing value is built once, under the write lock.
type lockedMap[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

func (lm *lockedMap[K, V]) get(k K, build func() V) V {
	lm.mu.RLock()
	v, ok := lm.m[k]
	lm.mu.RUnlock()
	if ok {
		return v
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if v, ok = lm.m[k]; !ok {
		if lm.m == nil {
			lm.m = make(map[K]V)
		}
		v = build()
		lm.m[k] = v
	}
	return v
}

// pair returns the children of (caller, route), looking them up the first time.
func (c *metricCache) pair(caller, route string) *pairMetrics {
	return c.pairs.get(pairKey{caller, route}, func() *pairMetrics {
		return &pairMetrics{caller: caller, route: route, m: c.m,
			duration: c.m.RequestDuration.WithLabelValues(caller, route), activity: c.activity.of(caller)}
	})
}

// answered returns the children of (caller, route) once the forward leg is
// over, and records what it learnt of the upstream: how long it took to
// answer (when an attempt was made, l.took) and the X-RateLimit-Remaining
// of its answer res (nil when none came).
func (c *metricCache) answered(caller, route string, l *leg, res *http.Response) *pairMetrics {
	p := c.pair(caller, route)
	if l.tok != nil {
		p.upstreamOnce.Do(func() { p.upstream = p.m.UpstreamDuration.WithLabelValues(p.route) })
		p.upstream.Observe(l.took.Seconds())
	}
	if res == nil {
		return p
	}
	// The canonical key, looked up directly: Get would canonicalize
	// "X-RateLimit-Remaining" into a new string on every response.
	if vs := res.Header["X-Ratelimit-Remaining"]; len(vs) > 0 && vs[0] != "" {
		if n, err := strconv.ParseInt(vs[0], 10, 64); err == nil && n >= 0 {
			p.remainingOnce.Do(func() { p.remaining = p.m.UpstreamRateLimitRemaining.WithLabelValues(p.route) })
			p.remaining.Set(float64(n))
		}
	}
	return p
}

// request returns faxgate_requests_total's child for method and status.
func (p *pairMetrics) request(method string, status int) prometheus.Counter {
	return p.requests.get(codeKey{method, status}, func() prometheus.Counter {
		return p.m.Requests.WithLabelValues(p.caller, p.route, method, metrics.Code(status))
	})
}
