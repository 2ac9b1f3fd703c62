package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/tokencache"
)

// The cache hands out the vectors' own children: what a request counts
// through it is what a label lookup reads, and a route's upstream series
// appear only when first used.
func TestMetricCacheUsesTheVectorsChildren(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	c := newMetricCache(m, nil)

	p := c.pair("svc", "contacts.list")
	if c.pair("svc", "contacts.list") != p {
		t.Fatal("a second lookup of the same pair built new children")
	}
	if c.pair("other", "contacts.list") == p || c.pair("svc", "contacts.create") == p {
		t.Fatal("different pairs share children")
	}
	p.request("POST", 200).Inc()
	p.request("POST", 200).Inc()
	p.request("GET", 404).Inc()
	p.duration.Observe(0.5)
	if got := testutil.ToFloat64(m.Requests.WithLabelValues("svc", "contacts.list", "POST", "200")); got != 2 {
		t.Errorf("requests{POST,200} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues("svc", "contacts.list", "GET", "404")); got != 1 {
		t.Errorf("requests{GET,404} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.UpstreamRateLimitRemaining); n != 0 {
		t.Errorf("%d ratelimit_remaining series before the upstream sent one, want 0", n)
	}
	if n := testutil.CollectAndCount(m.UpstreamDuration); n != 0 {
		t.Errorf("%d upstream_duration series before an upstream call, want 0", n)
	}
	// No attempt (no token) and no answer: still no upstream series.
	if c.answered("svc", "contacts.list", &leg{}, nil) != p || testutil.CollectAndCount(m.UpstreamDuration) != 0 {
		t.Error("a leg without an attempt made an upstream_duration series, or other children")
	}
	res := &http.Response{Header: http.Header{"X-Ratelimit-Remaining": {"7"}}}
	c.answered("svc", "contacts.list", &leg{tok: &tokencache.Token{}, took: 100 * time.Millisecond}, res)
	if got := testutil.ToFloat64(m.UpstreamRateLimitRemaining.WithLabelValues("contacts.list")); got != 7 {
		t.Errorf("ratelimit_remaining = %v, want 7", got)
	}
	if n := testutil.CollectAndCount(m.UpstreamDuration); n != 1 {
		t.Errorf("%d upstream_duration series, want 1", n)
	}
}
