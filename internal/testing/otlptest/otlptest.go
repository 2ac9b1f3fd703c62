// Package otlptest is an OTLP/HTTP trace collector for tests: a real
// listener that decodes what faxgate's exporter sends (protobuf), keeps the
// raw bodies (to search them for secrets) and can misbehave: refuse every
// export, or accept and never answer.
package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// Mode is how the collector answers.
type Mode int

const (
	// Accept decodes and keeps every export.
	Accept Mode = iota
	// Refuse answers every export with 503.
	Refuse
	// Hang accepts the connection and never answers (until the test ends).
	Hang
	// Echo answers every export 400 with a body that echoes the export's
	// request headers, as some collectors and gateways in front of them do.
	Echo
	// Redirect answers every export 307 to Options.RedirectTo.
	Redirect
)

// Options are the settings of a collector that need more than its Mode.
type Options struct {
	// RedirectTo is where mode Redirect sends exports (a base URL; the
	// export's path is appended).
	RedirectTo string
}

// Span is one exported span, flattened with its resource's attributes.
type Span struct {
	Name         string
	Kind         string // SERVER, CLIENT, INTERNAL ...
	TraceID      string // hex
	SpanID       string
	ParentSpanID string // "" for a root
	Attrs        map[string]string
	Resource     map[string]string
	StatusError  bool
	StatusText   string
	Start, End   time.Time
}

// Collector is a running test collector.
type Collector struct {
	// URL is its base URL, what tracing.endpoint takes.
	URL string

	mu      sync.Mutex
	spans   []Span
	raw     [][]byte
	headers []http.Header
	exports int
	stop    chan struct{}
}

// Start starts a collector in mode m; it stops at the end of the test.
func Start(t testing.TB, m Mode) *Collector { return StartWith(t, m, Options{}) }

// StartWith is Start with o.
func StartWith(t testing.TB, m Mode, o Options) *Collector {
	c := &Collector{stop: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.exports++
		c.mu.Unlock()
		switch m {
		case Refuse:
			_, _ = io.Copy(io.Discard, r.Body)
			http.Error(w, "refused", http.StatusServiceUnavailable)
			return
		case Hang:
			select {
			case <-c.stop:
			case <-r.Context().Done():
			}
			return
		case Echo:
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusBadRequest)
			_ = r.Header.Write(w)
			return
		case Redirect:
			_, _ = io.Copy(io.Discard, r.Body)
			http.Redirect(w, r, o.RedirectTo+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.add(body, r.Header.Clone(), &req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(func() { close(c.stop); srv.Close() })
	c.URL = srv.URL
	return c
}

func (c *Collector) add(raw []byte, h http.Header, req *coltrace.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.raw = append(c.raw, raw)
	c.headers = append(c.headers, h)
	for _, rs := range req.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{
					Name: s.Name, Kind: s.Kind.String(),
					TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					Attrs: attrs(s.Attributes), Resource: res,
					StatusError: s.GetStatus().GetCode() == 2, StatusText: s.GetStatus().GetMessage(),
					Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
				}
				if len(s.ParentSpanId) > 0 {
					sp.ParentSpanID = hex.EncodeToString(s.ParentSpanId)
				}
				// "SPAN_KIND_SERVER" -> "SERVER"
				if len(sp.Kind) > len("SPAN_KIND_") {
					sp.Kind = sp.Kind[len("SPAN_KIND_"):]
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.Key] = v.GetStringValue()
		default:
			// Ints, bools, doubles: their text form is enough for tests.
			m[kv.Key] = v.String()
		}
		if iv, ok := v.GetValue().(*commonpb.AnyValue_IntValue); ok {
			m[kv.Key] = strconv.FormatInt(iv.IntValue, 10)
		}
	}
	return m
}

// Spans returns every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Raw returns the bodies of every export received so far, as sent.
func (c *Collector) Raw() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.raw...)
}

// Headers returns the HTTP headers of every accepted export.
func (c *Collector) Headers() []http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]http.Header(nil), c.headers...)
}

// Exports is how many export requests arrived, in any mode.
func (c *Collector) Exports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports
}

// WaitFor waits up to limit for a span that ok accepts, and returns it.
func (c *Collector) WaitFor(t testing.TB, limit time.Duration, what string, ok func(Span) bool) Span {
	t.Helper()
	var found Span
	eventually.Eventually(t, limit, "otlptest: a span "+what, func() bool {
		for _, s := range c.Spans() {
			if ok(s) {
				found = s
				return true
			}
		}
		return false
	})
	return found
}
