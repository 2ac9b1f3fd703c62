package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/race"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// The benchmarks compare one request through the full gateway handler with
// the same request through a bare httputil.ReverseProxy that sets the same
// Authorization header, both to the same in-process upstream. `make bench`
// runs them side by side; docs/performance.md records the ratio.

const benchBody = `{"first_name":"Ada","last_name":"Lovelace","type":"individual","is_organization":false}`

// benchUpstream answers like the Customer API, without work of its own, so
// the difference between the two proxies is what is measured.
func benchUpstream(b testing.TB) *httptest.Server {
	resp := []byte(`{"status":1,"message":"Contacts fetched successfully.","data":[]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// fixedToken is a token source that always has a valid token: the hot path.
type fixedToken struct{ t *tokencache.Token }

func (f fixedToken) Token(context.Context) (*tokencache.Token, error) { return f.t, nil }
func (f fixedToken) Invalidate(*tokencache.Token) bool                { return false }
func (f fixedToken) Current() *tokencache.Token                       { return f.t }

func benchTransport(b testing.TB) *http.Transport {
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return tr
}

func benchGateway(b testing.TB, upstream string) http.Handler {
	return benchGatewayWith(b, upstream, "")
}

// benchGatewayWith is benchGateway with callers and routes from extra
// (YAML) instead of the one caller.
func benchGatewayWith(b testing.TB, upstream, extra string) http.Handler {
	return benchGatewayTraced(b, upstream, extra, nil)
}

// discardExporter takes the batches and drops them: the traced rows
// measure the request path's share of tracing, not a collector's.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// benchTracer is tracing as the gateway sets it up (docs/tracing.md):
// parent-based sampling at ratio, spans batched in the background.
func benchTracer(b testing.TB, ratio float64) trace.Tracer {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer("bench")
}

// benchGatewayTraced is benchGatewayWith with tracing through tracer (nil: off).
func benchGatewayTraced(b testing.TB, upstream, extra string, tracer trace.Tracer) http.Handler {
	cfg, rules := benchRules(b, upstream, extra)
	base, _ := url.Parse(upstream)
	// The access log is encoded as in production, then discarded.
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	tok := tokencache.NewToken(tokencache.NewSecret("benchmark-token-0123456789abcdef"), time.Now(), 24*time.Hour, false)
	return proxy.New(proxy.Options{
		Upstream: base, Transport: benchTransport(b), Tokens: fixedToken{tok}, Rules: rules,
		MaxBodyBytes: cfg.Server.MaxBodyBytes, ResendBufferBytes: cfg.Server.ResendBufferBytes, ReadTimeout: cfg.Server.ReadTimeout,
		UpstreamTimeout: cfg.Upstream.Timeout,
		Metrics:         proxy.NewMetrics(prometheus.NewRegistry()), Logger: log,
		Tracer: tracer,
	})
}

// benchRules are the benchmark's configuration and its compiled rules: one
// caller allowed everything, or the callers and routes of extra.
func benchRules(b testing.TB, upstream, extra string) (*config.Config, *policy.Rules) {
	if extra == "" {
		extra = `
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
`
	}
	cfg, err := config.Parse([]byte(`
upstream:
  base_url: "`+upstream+`"
  api_key_env: K
rate_limit:
  default: { rps: 1000000000, burst: 1000000000 }
`+extra), func(string) (string, bool) { return "k", true })
	if err != nil {
		b.Fatal(err)
	}
	rules, err := policy.Compile(cfg.RuleSections(), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	return cfg, rules
}

// benchGatewayShadow is benchGateway with a shadow candidate equal to the
// live configuration (state of its own), deciding every request too.
func benchGatewayShadow(b testing.TB, upstream string) *proxy.Handler {
	h := benchGateway(b, upstream).(*proxy.Handler)
	_, cand := benchRules(b, upstream, "")
	h.SetShadow(cand)
	return h
}

func bareProxy(b testing.TB, upstream string, pool httputil.BufferPool) http.Handler {
	u, _ := url.Parse(upstream)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Header.Set("Authorization", "Bearer benchmark-token-0123456789abcdef")
		},
		Transport:  benchTransport(b),
		BufferPool: pool,
	}
}

// syncPool is a BufferPool like the gateway's, so the "bare_pooled" rows
// isolate the gateway's own work from the copy-buffer saving.
type syncPool struct{ p sync.Pool }

func (s *syncPool) Get() []byte {
	if b, ok := s.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 32<<10)
}
func (s *syncPool) Put(b []byte) { s.p.Put(&b) }

// discardWriter is a reusable ResponseWriter, so neither side pays for a recorder.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// SetReadDeadline lets http.ResponseController work as on a real connection.
func (d *discardWriter) SetReadDeadline(time.Time) error { return nil }

func runBench(b *testing.B, h http.Handler, method, target, body string) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			var rd io.Reader
			if body != "" {
				rd = strings.NewReader(body)
			}
			r := httptest.NewRequest(method, target, rd)
			r.RemoteAddr = "127.0.0.1:40000"
			r.Header.Set("Content-Type", "application/json")
			clear(w.h)
			h.ServeHTTP(w, r)
		}
	})
}

func BenchmarkProxy(b *testing.B) {
	up := benchUpstream(b)
	gw, bare, pooled := benchGateway(b, up.URL), bareProxy(b, up.URL, nil), bareProxy(b, up.URL, &syncPool{})
	traced := benchGatewayTraced(b, up.URL, "", benchTracer(b, 0.05))
	shadowed := benchGatewayShadow(b, up.URL)
	for _, tc := range []struct{ name, method, target, body string }{
		{"POST_contacts_create", "POST", "/v1/contacts/create", benchBody},
		{"GET_field_rule", "GET", "/v1/esign_templates/tpl_1/field_rule", ""},
	} {
		b.Run(tc.name+"/bare", func(b *testing.B) { runBench(b, bare, tc.method, tc.target, tc.body) })
		b.Run(tc.name+"/bare_pooled", func(b *testing.B) { runBench(b, pooled, tc.method, tc.target, tc.body) })
		b.Run(tc.name+"/faxgate", func(b *testing.B) { runBench(b, gw, tc.method, tc.target, tc.body) })
		// A shadow candidate equal to the live configuration.
		b.Run(tc.name+"/faxgate_shadow", func(b *testing.B) { runBench(b, shadowed, tc.method, tc.target, tc.body) })
		// tracing.sample_ratio 0.05, requests without a traceparent.
		b.Run(tc.name+"/faxgate_traced_5pct", func(b *testing.B) { runBench(b, traced, tc.method, tc.target, tc.body) })
	}
}

// scaleConfig is a configuration with n callers, each with a CIDR, a header
// value and a SPIFFE ID, and routes extra routes: the request under test is
// identified by the last caller's CIDR, as a large fleet's would be.
func scaleConfig(n, routes int) string {
	var sb strings.Builder
	sb.WriteString("callers:\n  trusted_proxies: [\"10.255.0.0/16\"]\n  list:\n")
	for i := range n - 1 {
		fmt.Fprintf(&sb, "    - {name: c%d, cidrs: [\"10.%d.%d.0/24\"], header_values: [\"h%d\"], spiffe_ids: [\"spiffe://prod/ns/n/sa/c%d\"], allow: [\"contacts.*\", \"esign.*\", \"extra.r%d\"]}\n",
			i, i/256, i%256, i, i, i%routes)
	}
	sb.WriteString("    - {name: svc, cidrs: [\"127.0.0.0/8\"], allow: [\"*\"]}\n")
	sb.WriteString("routes:\n  extra:\n")
	for i := range routes {
		fmt.Fprintf(&sb, "    - {name: extra.r%d, method: POST, path: \"/v1/extra/r%d/{id}\"}\n", i, i)
	}
	return sb.String()
}

// BenchmarkProxyScale: a request's cost does not grow with the number of
// callers and routes (identity by CIDR is one map lookup per prefix length,
// routes are a table).
func BenchmarkProxyScale(b *testing.B) {
	up := benchUpstream(b)
	for _, tc := range []struct {
		name string
		cfg  string
	}{
		{"1_caller", ""},
		{"2000_callers_500_routes", scaleConfig(2000, 500)},
	} {
		h := benchGatewayWith(b, up.URL, tc.cfg)
		b.Run(tc.name, func(b *testing.B) { runBench(b, h, "POST", "/v1/contacts/create", benchBody) })
	}
}

// scaleFile is the 2,000-caller, 500-route config file.
func scaleFile() []byte {
	return []byte("upstream:\n  base_url: http://127.0.0.1:1\n  api_key_env: K\n" + scaleConfig(2000, 500))
}

// parseAndCompile is what a reload of text does before the new rules apply.
func parseAndCompile(tb testing.TB, text []byte) {
	getenv := func(string) (string, bool) { return "k", true }
	cfg, err := config.Parse(text, getenv)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := policy.Compile(cfg.RuleSections(), time.Now); err != nil {
		tb.Fatal(err)
	}
}

// TestScaleConfigCompilesFast guards a reload of the 2,000-caller,
// 500-route file against a change of its order (a quadratic pass over the
// callers would take seconds). The bound is ten times what it costs on an
// idle machine (about 100 ms, BenchmarkScaleConfigCompile), so that a
// loaded 2-core CI machine passes it and a regression of the order does
// not; the benchmark tracks the figure itself (docs/performance.md).
func TestScaleConfigCompilesFast(t *testing.T) {
	text := scaleFile()
	best := time.Hour
	for range 3 {
		start := time.Now()
		parseAndCompile(t, text)
		best = min(best, time.Since(start))
	}
	limit := time.Second
	if race.Enabled {
		limit *= 10 // the race detector's slowdown
	}
	if best > limit {
		t.Errorf("parsing and compiling the 2,000-caller file took %v, want under %v", best, limit)
	}
	t.Logf("2,000 callers, 500 routes: parse + compile %v", best)
}

// BenchmarkScaleConfigCompile is one reload's parse and compile of the
// 2,000-caller, 500-route file.
func BenchmarkScaleConfigCompile(b *testing.B) {
	text := scaleFile()
	b.ReportAllocs()
	for b.Loop() {
		parseAndCompile(b, text)
	}
}

// allocBudget is the most allocations one proxied request may cost, the
// in-process upstream's and the transport's included (the bare
// ReverseProxy costs 99 and 85 on the same requests). Measured at 100 and
// 85 when set: 126 and 105 before the hot path's allocations were first
// cut, 116 and 100 before the upstream context of deadline.go, 113 and 97
// before the forward of forward.go replaced ReverseProxy. A small POST body is read first, which
// costs allocations and saves a write(2) to the upstream
// (docs/performance.md). A change that adds allocations to the hot path
// fails here; make test runs it without the race detector.
var allocBudget = map[string]float64{"POST_contacts_create": 103, "GET_field_rule": 88}

// TestAllocsPerRequest guards the hot path's allocations. make test and make
// bench run it without the race detector; under it counts differ, so the
// race run skips it.
func TestAllocsPerRequest(t *testing.T) {
	checkAllocs(t, benchGateway(t, benchUpstream(t).URL), "request", allocBudget)
}

// shadowAllocBudget is the most allocations one request may cost with a
// shadow candidate in force whose limits are local: its decision (the
// outcome, the caller's identity) and the series of its metric. Measured
// at 100 and 87 when set: one or two more than without a candidate.
var shadowAllocBudget = map[string]float64{"POST_contacts_create": 103, "GET_field_rule": 90}

// TestAllocsPerShadowedRequest guards a local candidate's cost, and that a
// candidate taken away costs nothing more: without one, nothing is decided
// or allocated for it.
func TestAllocsPerShadowedRequest(t *testing.T) {
	h := benchGatewayShadow(t, benchUpstream(t).URL)
	checkAllocs(t, h, "shadowed request", shadowAllocBudget)
	h.SetShadow(nil)
	checkAllocs(t, h, "request once the candidate is gone", allocBudget)
}

// tracedAllocBudget is the most allocations one request may cost with
// tracing on and the request not sampled (95 % of requests at the default
// sample_ratio): the SERVER span, the request's context carrying it and
// the traceparent sent upstream (docs/performance.md, Tracing). Measured
// at 106 and 92 when set.
var tracedAllocBudget = map[string]float64{"POST_contacts_create": 108, "GET_field_rule": 94}

// TestAllocsPerUnsampledRequest guards tracing's cost on the requests it
// does not record.
func TestAllocsPerUnsampledRequest(t *testing.T) {
	checkAllocs(t, benchGatewayTraced(t, benchUpstream(t).URL, "", benchTracer(t, 0)), "unsampled traced request", tracedAllocBudget)
}

// checkAllocs measures the allocations of a POST and a GET through h
// against budget, by case name.
func checkAllocs(t *testing.T, h http.Handler, what string, budget map[string]float64) {
	t.Helper()
	if race.Enabled {
		t.Skip("allocation counts are judged without the race detector: make bench")
	}
	w := &discardWriter{h: http.Header{}}
	for _, tc := range []struct{ name, method, target, body string }{
		{"POST_contacts_create", "POST", "/v1/contacts/create", benchBody},
		{"GET_field_rule", "GET", "/v1/esign_templates/tpl_1/field_rule", ""},
	} {
		got := testing.AllocsPerRun(200, func() {
			var rd io.Reader
			if tc.body != "" {
				rd = strings.NewReader(tc.body)
			}
			r := httptest.NewRequest(tc.method, tc.target, rd)
			r.RemoteAddr = "127.0.0.1:40000"
			r.Header.Set("Content-Type", "application/json")
			clear(w.h)
			h.ServeHTTP(w, r)
		})
		if got > budget[tc.name] {
			t.Errorf("%s: %.0f allocations per %s, budget %.0f", tc.name, got, what, budget[tc.name])
		}
		t.Logf("%s: %.0f allocations per %s (budget %.0f)", tc.name, got, what, budget[tc.name])
	}
}
