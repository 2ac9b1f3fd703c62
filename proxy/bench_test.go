package proxy_test

import (
	"context"
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
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/metrics"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// The benchmarks compare one request through the full gateway handler with
// the same request through a bare httputil.ReverseProxy that sets the same
// Authorization header, both to the same in-process upstream. `make bench`
// runs them side by side; the README's Performance section records the ratio.

const benchBody = `{"first_name":"Ada","last_name":"Lovelace","type":"individual","is_organization":false}`

// benchUpstream answers like the Customer API, without work of its own, so
// the difference between the two proxies is what is measured.
func benchUpstream(b *testing.B) *httptest.Server {
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

func benchTransport(b *testing.B) *http.Transport {
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return tr
}

func benchGateway(b *testing.B, upstream string) http.Handler {
	cfg, err := config.Parse([]byte(`
upstream:
  base_url: "`+upstream+`"
  api_key_env: K
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
rate_limit:
  default: { rps: 1000000000, burst: 1000000000 }
`), func(string) (string, bool) { return "k", true })
	if err != nil {
		b.Fatal(err)
	}
	rules, err := policy.Compile(cfg, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	base, _ := url.Parse(upstream)
	// The access log is encoded as in production, then discarded.
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	tok := tokencache.NewToken(tokencache.NewSecret("benchmark-token-0123456789abcdef"), time.Now(), 24*time.Hour, false)
	return proxy.New(proxy.Options{
		Upstream: base, Transport: benchTransport(b), Tokens: fixedToken{tok}, Rules: rules,
		MaxBodyBytes: cfg.Server.MaxBodyBytes, ResendBufferBytes: cfg.Server.ResendBufferBytes, ReadTimeout: cfg.Server.ReadTimeout,
		UpstreamTimeout: cfg.Upstream.Timeout,
		Metrics:         metrics.New(prometheus.NewRegistry(), "bench"), Logger: log,
	})
}

func bareProxy(b *testing.B, upstream string, pool httputil.BufferPool) http.Handler {
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
	for _, tc := range []struct{ name, method, target, body string }{
		{"POST_contacts_create", "POST", "/v1/contacts/create", benchBody},
		{"GET_field_rule", "GET", "/v1/esign_templates/tpl_1/field_rule", ""},
	} {
		b.Run(tc.name+"/bare", func(b *testing.B) { runBench(b, bare, tc.method, tc.target, tc.body) })
		b.Run(tc.name+"/bare_pooled", func(b *testing.B) { runBench(b, pooled, tc.method, tc.target, tc.body) })
		b.Run(tc.name+"/faxgate", func(b *testing.B) { runBench(b, gw, tc.method, tc.target, tc.body) })
	}
}
