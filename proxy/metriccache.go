package proxy

import (
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
	m             *metrics.Metrics
	duration      prometheus.Observer // faxgate_request_duration_seconds{caller,route}

	// The route's upstream children are looked up on first use, not with
	// the pair: a series appears only once it has something to say (a
	// remaining of 0 before the upstream sent one would be a lie).
	upstreamOnce  sync.Once
	upstream      prometheus.Observer // faxgate_upstream_duration_seconds{route}
	remainingOnce sync.Once
	remaining     prometheus.Gauge // faxgate_upstream_ratelimit_remaining{route}

	mu       sync.RWMutex
	requests map[codeKey]prometheus.Counter // faxgate_requests_total{caller,route,method,code}
}

type codeKey struct {
	method string
	status int
}

type metricCache struct {
	m     *metrics.Metrics
	mu    sync.RWMutex
	pairs map[pairKey]*pairMetrics
}

func newMetricCache(m *metrics.Metrics) *metricCache {
	return &metricCache{m: m, pairs: make(map[pairKey]*pairMetrics)}
}

// pair returns the children of (caller, route), looking them up the first time.
func (c *metricCache) pair(caller, route string) *pairMetrics {
	k := pairKey{caller, route}
	c.mu.RLock()
	p := c.pairs[k]
	c.mu.RUnlock()
	if p != nil {
		return p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p = c.pairs[k]; p == nil {
		p = &pairMetrics{
			caller:   caller,
			route:    route,
			m:        c.m,
			duration: c.m.RequestDuration.WithLabelValues(caller, route),
			requests: make(map[codeKey]prometheus.Counter),
		}
		c.pairs[k] = p
	}
	return p
}

// upstreamDuration returns faxgate_upstream_duration_seconds{route}.
func (p *pairMetrics) upstreamDuration() prometheus.Observer {
	p.upstreamOnce.Do(func() { p.upstream = p.m.UpstreamDuration.WithLabelValues(p.route) })
	return p.upstream
}

// rateLimitRemaining returns faxgate_upstream_ratelimit_remaining{route}.
func (p *pairMetrics) rateLimitRemaining() prometheus.Gauge {
	p.remainingOnce.Do(func() { p.remaining = p.m.UpstreamRateLimitRemaining.WithLabelValues(p.route) })
	return p.remaining
}

// request returns faxgate_requests_total's child for method and status.
func (p *pairMetrics) request(method string, status int) prometheus.Counter {
	k := codeKey{method, status}
	p.mu.RLock()
	ctr := p.requests[k]
	p.mu.RUnlock()
	if ctr != nil {
		return ctr
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ctr = p.requests[k]; ctr == nil {
		ctr = p.m.Requests.WithLabelValues(p.caller, p.route, method, metrics.Code(status))
		p.requests[k] = ctr
	}
	return ctr
}
