package gateway

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestStartValues pins, as golden exposition text, the series that exist
// from the first scrape on: dashboards and alerts (rate() over the refresh
// results, the expiry alert, build info) rely on them being there before any
// request or renewal happened.
func TestStartValues(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	newMetrics(reg, "v1.2.3", "0a1b2c3")
	golden := `
# HELP faxgate_build_info Always 1; labels carry the faxgate version, the git revision it was built from and the Go version it was built with.
# TYPE faxgate_build_info gauge
faxgate_build_info{goversion="` + runtime.Version() + `",revision="0a1b2c3",version="v1.2.3"} 1
# HELP faxgate_inflight_requests Requests being served right now.
# TYPE faxgate_inflight_requests gauge
faxgate_inflight_requests 0
# HELP faxgate_token_expiry_timestamp_seconds Unix time at which the current Bearer token expires; 0 when none is held.
# TYPE faxgate_token_expiry_timestamp_seconds gauge
faxgate_token_expiry_timestamp_seconds 0
# HELP faxgate_token_refresh_total Calls to the upstream token endpoint, by result (ok, error, invalid_key).
# TYPE faxgate_token_refresh_total counter
faxgate_token_refresh_total{result="error"} 0
faxgate_token_refresh_total{result="invalid_key"} 0
faxgate_token_refresh_total{result="ok"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(golden),
		"faxgate_build_info", "faxgate_inflight_requests",
		"faxgate_token_expiry_timestamp_seconds", "faxgate_token_refresh_total"); err != nil {
		t.Fatal(err)
	}
	// The vectors have no series until used: a label value only ever comes
	// from the config (proxy.Handler.SetRules, TestSeriesFromTheStart) or a
	// request, never from newMetrics.
	for _, name := range []string{"faxgate_requests_total", "faxgate_request_duration_seconds",
		"faxgate_upstream_duration_seconds", "faxgate_denied_total", "faxgate_rate_limited_total",
		"faxgate_upstream_401_retries_total"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
			t.Errorf("%s has %d series at start (err %v), want 0", name, n, err)
		}
	}
}

// TestNothingGlobal: two gateways in one process (tests, the demo) each get
// their own collectors, and the default registry is never touched.
func TestNothingGlobal(t *testing.T) {
	a, b := prometheus.NewRegistry(), prometheus.NewRegistry()
	ma, mb := newMetrics(a, "a", ""), newMetrics(b, "b", "")
	ma.Proxy.Requests.WithLabelValues("x", "y", "GET", "200").Inc()
	if n := testutil.ToFloat64(mb.Proxy.Requests.WithLabelValues("x", "y", "GET", "200")); n != 0 {
		t.Fatalf("second instance sees the first one's count: %v", n)
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "faxgate_") {
			t.Fatalf("%s is on the default registry", mf.GetName())
		}
	}
}

// TestRevisionUnknownWhenUnset: a binary built without the Makefile's
// -ldflags still says which revision label it has.
func TestRevisionUnknownWhenUnset(t *testing.T) {
	m := newMetrics(prometheus.NewPedanticRegistry(), "dev", "")
	if n := testutil.ToFloat64(m.BuildInfo.WithLabelValues("dev", "unknown", runtime.Version())); n != 1 {
		t.Fatalf("faxgate_build_info{revision=\"unknown\"} = %v, want 1", n)
	}
}

func TestReadyFollowsTheReadinessFunction(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	ready := false
	registerReady(reg, func() bool { return ready })
	for _, want := range []float64{0, 1} {
		ready = want == 1
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(mfs) != 1 || mfs[0].GetName() != "faxgate_ready" || mfs[0].GetType().String() != "GAUGE" {
			t.Fatalf("gathered %v, want the one gauge faxgate_ready", mfs)
		}
		if got := mfs[0].GetMetric()[0].GetGauge().GetValue(); got != want {
			t.Errorf("ready=%v: faxgate_ready = %v, want %v", ready, got, want)
		}
	}
}
