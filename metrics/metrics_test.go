package metrics_test

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/metrics"
)

// TestStartValues pins, as golden exposition text, the series that exist
// from the first scrape on: dashboards and alerts (rate() over the refresh
// results, the expiry alert, build info) rely on them being there before any
// request or renewal happened.
func TestStartValues(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	metrics.New(reg, "v1.2.3")
	golden := `
# HELP faxgate_build_info Always 1; labels carry the faxgate version and the Go version it was built with.
# TYPE faxgate_build_info gauge
faxgate_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1
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
	// from a request, never from New.
	for _, name := range []string{"faxgate_requests_total", "faxgate_request_duration_seconds",
		"faxgate_upstream_duration_seconds", "faxgate_denied_total", "faxgate_rate_limited_total",
		"faxgate_upstream_401_retries_total"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
			t.Errorf("%s has %d series at start (err %v), want 0", name, n, err)
		}
	}
}

// documentedMetrics are metrics of the table in docs/metrics-and-alerts.md,
// with their types and labels. They are not the whole table: the TLS vectors
// have no series until a certificate or handshake sets them, faxgate_ready is
// RegisterReady's (TestReadyFollowsTheReadinessFunction), and
// faxgate_config_last_reload_successful is not checked here. Every row must
// be registered by New: a metric that dashboards and alerts name is never
// optional.
var documentedMetrics = []struct {
	name   string
	typ    string // dto.MetricType name
	labels []string
}{
	{"faxgate_requests_total", "COUNTER", []string{"caller", "code", "method", "route"}},
	{"faxgate_request_duration_seconds", "HISTOGRAM", []string{"caller", "route"}},
	{"faxgate_upstream_duration_seconds", "HISTOGRAM", []string{"route"}},
	{"faxgate_denied_total", "COUNTER", []string{"caller", "reason", "route"}},
	{"faxgate_rate_limited_total", "COUNTER", []string{"caller"}},
	{"faxgate_token_refresh_total", "COUNTER", []string{"result"}},
	{"faxgate_token_expiry_timestamp_seconds", "GAUGE", nil},
	{"faxgate_upstream_401_retries_total", "COUNTER", []string{"route"}},
	{"faxgate_token_store_errors_total", "COUNTER", []string{"op"}},
	{"faxgate_inflight_requests", "GAUGE", nil},
	{"faxgate_build_info", "GAUGE", []string{"goversion", "version"}},
	{"faxgate_config_reload_total", "COUNTER", []string{"result"}},
	{"faxgate_config_last_reload_success_timestamp_seconds", "GAUGE", nil},
	{"faxgate_upstream_throttled_total", "COUNTER", []string{"route"}},
	{"faxgate_upstream_hold_seconds", "GAUGE", []string{"route"}},
	{"faxgate_upstream_ratelimit_remaining", "GAUGE", []string{"route"}},
	{"faxgate_upstream_budget_used_ratio", "GAUGE", []string{"limit", "route"}},
	{"faxgate_upstream_budget_refused_total", "COUNTER", []string{"caller", "limit"}},
}

// TestMetricsMatchTheDocs: every metric of documentedMetrics is registered,
// with the type and the label names docs/metrics-and-alerts.md gives it,
// and has help text.
func TestMetricsMatchTheDocs(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg, "v1.2.3")
	// Use every vector once so it shows up in a scrape.
	m.Requests.WithLabelValues("intake", "contacts.list", "POST", "200").Inc()
	m.RequestDuration.WithLabelValues("intake", "contacts.list").Observe(0.01)
	m.UpstreamDuration.WithLabelValues("contacts.list").Observe(0.01)
	m.Denied.WithLabelValues("intake", "numbers.delete", "forbidden").Inc()
	m.RateLimited.WithLabelValues("intake").Inc()
	m.Upstream401Retries.WithLabelValues("contacts.create").Inc()
	m.TokenStoreErrors.WithLabelValues("load").Inc()
	m.UpstreamThrottled.WithLabelValues("contacts.list").Inc()
	metrics.RegisterHolds(reg, func(yield func(string, float64)) { yield("contacts.list", 3) })
	m.UpstreamRateLimitRemaining.WithLabelValues("contacts.list").Set(12)
	m.BudgetUsedRatio.WithLabelValues("tenant", "").Set(0.5)
	m.BudgetRefused.WithLabelValues("intake", "tenant").Inc()

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i, mf := range mfs {
		got[mf.GetName()] = i
	}
	for _, want := range documentedMetrics {
		t.Run(want.name, func(t *testing.T) {
			i, ok := got[want.name]
			if !ok {
				t.Fatal("not registered by New")
			}
			mf := mfs[i]
			if typ := mf.GetType().String(); typ != want.typ {
				t.Errorf("type = %s, want %s", typ, want.typ)
			}
			if strings.TrimSpace(mf.GetHelp()) == "" {
				t.Error("no help text")
			}
			for _, s := range mf.GetMetric() {
				var names []string
				for _, lp := range s.GetLabel() {
					names = append(names, lp.GetName())
				}
				if !slices.Equal(names, want.labels) { // Gather sorts label pairs by name
					t.Errorf("labels = %v, want %v", names, want.labels)
				}
			}
		})
	}
	// Others may be registered too, under the prefix and linted below.
	for name := range got {
		if !strings.HasPrefix(name, "faxgate_") {
			t.Errorf("%s is registered without the faxgate_ prefix", name)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestHistogramsCoverMillisecondsToTheUpstreamTimeout(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg, "v")
	m.RequestDuration.WithLabelValues("a", "b").Observe(0.0005)
	m.UpstreamDuration.WithLabelValues("b").Observe(0.0005)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetType().String() != "HISTOGRAM" {
			continue
		}
		b := mf.GetMetric()[0].GetHistogram().GetBucket()
		if len(b) == 0 || b[0].GetUpperBound() > 0.001 || b[len(b)-1].GetUpperBound() < 60 {
			t.Errorf("%s buckets span %v..%v, want at most 1ms .. at least 60s (the default upstream.timeout)",
				mf.GetName(), b[0].GetUpperBound(), b[len(b)-1].GetUpperBound())
		}
	}
}

// TestNothingGlobal: two gateways in one process (tests, the demo) each get
// their own collectors, and the default registry is never touched.
func TestNothingGlobal(t *testing.T) {
	a, b := prometheus.NewRegistry(), prometheus.NewRegistry()
	ma, mb := metrics.New(a, "a"), metrics.New(b, "b")
	ma.Requests.WithLabelValues("x", "y", "GET", "200").Inc()
	if n := testutil.ToFloat64(mb.Requests.WithLabelValues("x", "y", "GET", "200")); n != 0 {
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

func TestMethod(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET", "GET"}, {"POST", "POST"}, {"PATCH", "PATCH"}, {"PUT", "PUT"}, {"DELETE", "DELETE"},
		// Anything else collapses, so a caller cannot mint label values.
		{"get", "other"}, {"Post", "other"}, {"HEAD", "other"}, {"OPTIONS", "other"},
		{"CONNECT", "other"}, {"TRACE", "other"}, {"PROPFIND", "other"}, {"", "other"},
		{"GET ", "other"}, {"DELETE\x00", "other"}, {strings.Repeat("X", 1000), "other"},
	} {
		if got := metrics.Method(tc.in); got != tc.want {
			t.Errorf("Method(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = metrics.Method("PATCH"), metrics.Method("HEAD") }); n != 0 {
		t.Errorf("Method allocates %v times per call, want 0 (it is on every request)", n)
	}
}

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		in   int
		want string
	}{
		{200, "200"}, {101, "101"}, {404, "404"}, {499, "499"}, {503, "503"}, {599, "599"},
		{100, "100"}, {99, "99"}, {0, "0"},
		// Out of the table: a fixed word, never an unbounded set of values.
		{600, "other"}, {999, "other"}, {-1, "other"}, {1 << 30, "other"},
	} {
		if got := metrics.Code(tc.in); got != tc.want {
			t.Errorf("Code(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = metrics.Code(404) }); n != 0 {
		t.Errorf("Code allocates %v times per call, want 0 (it is on every request)", n)
	}
}

func TestReadyFollowsTheReadinessFunction(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	ready := false
	metrics.RegisterReady(reg, func() bool { return ready })
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
