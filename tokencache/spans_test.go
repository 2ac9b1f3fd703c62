package tokencache_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/tokencache"
)

// tracedFixture is a manager whose spans go to a recorder.
func tracedFixture(t *testing.T, f *fakeFetcher, clock *clocktest.Fake) (*tokencache.Manager, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	m := tokencache.NewManager(tokencache.Options{
		Fetcher: f, Clock: clock, RefreshBefore: time.Hour,
		RetryMin: time.Second, RetryMax: time.Second, Metrics: tokencache.NewMetrics(prometheus.NewRegistry()),
		Jitter: func() float64 { return 0 }, Tracer: tp.Tracer("test"),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, rec, tp
}

func result(s sdktrace.ReadOnlySpan) string {
	for _, kv := range s.Attributes() {
		if kv.Key == "faxgate.result" {
			return kv.Value.AsString()
		}
	}
	return ""
}

// Every renewal is a trace of its own, token.renew, whose faxgate.result
// is the word faxgate_token_refresh_total counts, with the token call as a
// child; and the error's text is never recorded.
func TestRenewalTraces(t *testing.T) {
	clock := clocktest.New(t0)
	secretErr := errors.New("upstream said: sk_live_do-not-trace")
	f := &fakeFetcher{clock: clock, lifetime: 24 * time.Hour, errs: []error{tokencache.ErrInvalidKey, secretErr}}
	m, rec, _ := tracedFixture(t, f, clock)
	for range 2 { // two failed attempts, each followed by its backoff
		if !clock.WaitPending(1, 5*time.Second) {
			t.Fatal("renewal loop never went to sleep")
		}
		clock.Advance(time.Second)
	}
	// The third attempt succeeds; once the loop sleeps again, its span has ended.
	if !clock.WaitPending(1, 5*time.Second) || m.Current() == nil {
		t.Fatal("no token after the third attempt")
	}
	var results []string
	fetches := map[string]int{}
	for _, s := range rec.Ended() {
		switch s.Name() {
		case tokencache.RenewSpan:
			if s.Parent().IsValid() {
				t.Errorf("token.renew has a parent: %v", s.Parent())
			}
			results = append(results, result(s))
			if s.Status().Description != "" && result(s) == "ok" {
				t.Errorf("a successful renewal has status %q", s.Status().Description)
			}
		case "token.fetch":
			fetches[s.Parent().TraceID().String()]++
		}
		if d := s.Status().Description; strings.Contains(d, "sk_live") {
			t.Errorf("span %s records the error's text: %q", s.Name(), d)
		}
	}
	if want := []string{"invalid_key", "error", "ok"}; len(results) != 3 || results[0] != want[0] || results[1] != want[1] || results[2] != want[2] {
		t.Errorf("token.renew results %q, want %q", results, want)
	}
	if len(fetches) != 3 {
		t.Errorf("token.fetch spans in %d traces, want one in each of the 3 renewals", len(fetches))
	}
}

// A request that waits for the token gets a token.wait span under its own;
// one that finds a valid token makes none.
func TestTokenWaitSpan(t *testing.T) {
	clock := clocktest.New(t0)
	gate := make(chan struct{})
	f := &fakeFetcher{clock: clock, lifetime: 24 * time.Hour, gate: gate}
	m, rec, tp := tracedFixture(t, f, clock)
	ctx, req := tp.Tracer("test").Start(context.Background(), "POST contacts.list")
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := m.Token(wctx)
		got <- err
	}()
	eventually.Eventually(t, 5*time.Second, "the request waiting for the token (its token.wait span started)", func() bool {
		for _, s := range rec.Started() {
			if s.Name() == "token.wait" {
				return true
			}
		}
		return false
	})
	close(gate)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, err := m.Token(ctx); err != nil { // the hot path: no span
		t.Fatal(err)
	}
	req.End()
	var waits []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "token.wait" {
			waits = append(waits, s)
		}
	}
	if len(waits) != 1 {
		t.Fatalf("%d token.wait spans, want 1 (the wait, not the cached token)", len(waits))
	}
	if waits[0].Parent().SpanID() != req.SpanContext().SpanID() || result(waits[0]) != "ok" {
		t.Errorf("token.wait: parent %s result %q, want the request's span and ok", waits[0].Parent().SpanID(), result(waits[0]))
	}
}
