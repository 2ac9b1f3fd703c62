package otlpexport

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/faxgate/faxgate/internal/base/clock"
)

// collector is an OTLP/HTTP endpoint for the exporter's tests: it keeps
// every request it gets and answers each as answer says (200 when nil).
type collector struct {
	URL string // the traces endpoint

	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	paths   []string
	answer  func(n int, w http.ResponseWriter) // n counts requests from 1
	done    chan struct{}                      // closed at the test's end
}

func startCollector(t *testing.T, answer func(n int, w http.ResponseWriter)) *collector {
	t.Helper()
	c := &collector{answer: answer, done: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.bodies = append(c.bodies, body)
		c.headers = append(c.headers, r.Header.Clone())
		c.paths = append(c.paths, r.Method+" "+r.URL.Path)
		n, answer := len(c.bodies), c.answer
		c.mu.Unlock()
		if answer != nil {
			answer(n, w)
		}
	}))
	t.Cleanup(func() { close(c.done); srv.Close() })
	c.URL = srv.URL + "/v1/traces"
	return c
}

// got returns the n-th request (from 1): its method and path, header and body.
func (c *collector) got(t *testing.T, n int) (string, http.Header, []byte) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bodies) < n {
		t.Fatalf("the collector got %d requests, want at least %d", len(c.bodies), n)
	}
	return c.paths[n-1], c.headers[n-1], c.bodies[n-1]
}

func (c *collector) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bodies)
}

// request decodes the n-th request's body (from 1) as the collector would.
func (c *collector) request(t *testing.T, n int) *coltrace.ExportTraceServiceRequest {
	t.Helper()
	_, _, body := c.got(t, n)
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		t.Fatalf("request %d does not decode as an ExportTraceServiceRequest: %v", n, err)
	}
	return &req
}

// testOptions are the exporter's settings of the gateway (docs/tracing.md)
// with a fake clock and a plain client.
func testOptions(url string, clk clock.Clock) Options {
	return Options{URL: url, Client: &http.Client{}, Clock: clk, Timeout: 10 * time.Second,
		RetryFirst: time.Second, RetryMax: 4 * time.Second}
}

func newExporter(t *testing.T, o Options) *Exporter {
	t.Helper()
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// someSpans are n ended spans of a real tracer provider.
func someSpans(n int) []sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.Empty()))
	tr := tp.Tracer("test")
	for range n {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	return rec.Ended()
}
