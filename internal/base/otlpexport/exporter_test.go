package otlpexport

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
)

// exportAsync runs one export of spans on its own goroutine; the channel
// gets its result.
func exportAsync(ctx context.Context, e *Exporter, n int) <-chan error {
	spans := someSpans(n)
	done := make(chan error, 1)
	go func() { done <- e.ExportSpans(ctx, spans) }()
	return done
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the export did not return")
		return nil
	}
}

// waitsFor waits until the exporter sleeps on clk and returns how long the
// sleep is.
func waitsFor(t *testing.T, clk *clocktest.Fake) time.Duration {
	t.Helper()
	if !clk.WaitPending(1, 5*time.Second) {
		t.Fatal("the exporter did not wait to retry")
	}
	at, _ := clk.NextDeadline()
	return at.Sub(clk.Now())
}

func status(code int, header ...string) func(int, http.ResponseWriter) {
	return func(_ int, w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
	}
}

func TestExportSendsProtobufWithHeaders(t *testing.T) {
	col := startCollector(t, nil)
	o := testOptions(col.URL, clock.Real{})
	o.Headers = map[string]string{"Authorization": "Basic c2VjcmV0", "X-Scope-OrgID": "team-a"}
	o.UserAgent = "faxgate/test"
	if err := newExporter(t, o).ExportSpans(context.Background(), someSpans(3)); err != nil {
		t.Fatal(err)
	}
	if n := col.requests(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	path, h, _ := col.got(t, 1)
	for k, want := range map[string]string{"Content-Type": "application/x-protobuf", "Authorization": "Basic c2VjcmV0",
		"X-Scope-Orgid": "team-a", "User-Agent": "faxgate/test"} {
		if got := h.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if path != "POST /v1/traces" {
		t.Errorf("sent %s, want POST /v1/traces", path)
	}
	if n := len(col.request(t, 1).ResourceSpans[0].ScopeSpans[0].Spans); n != 3 {
		t.Errorf("%d spans decoded, want 3", n)
	}
}

func TestNothingToExportSendsNothing(t *testing.T) {
	col := startCollector(t, nil)
	e := newExporter(t, testOptions(col.URL, clock.Real{}))
	if err := e.ExportSpans(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if n := col.requests(); n != 0 {
		t.Errorf("%d requests for no span, want none", n)
	}
}

// TestRetriesUntilAccepted: every answer OTLP/HTTP says to retry, and a
// connection cut before any answer, is retried after the backoff or the
// collector's Retry-After, whichever is longer; the same body goes again.
func TestRetriesUntilAccepted(t *testing.T) {
	hangUp := func(_ int, w http.ResponseWriter) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	for _, c := range []struct {
		name  string
		first func(int, http.ResponseWriter)
		wait  time.Duration
	}{
		{"503", status(503), time.Second},
		{"502", status(502), time.Second},
		{"504", status(504), time.Second},
		{"429 with Retry-After", status(429, "Retry-After", "3"), 3 * time.Second},
		{"503 with a Retry-After shorter than the backoff", status(503, "Retry-After", "0"), time.Second},
		{"429 with a Retry-After date", status(429, "Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"), time.Second},
		{"connection cut", hangUp, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := startCollector(t, func(n int, w http.ResponseWriter) {
				if n == 1 {
					c.first(n, w)
				}
			})
			clk := clocktest.New(time.Now())
			done := exportAsync(context.Background(), newExporter(t, testOptions(col.URL, clk)), 2)
			if got := waitsFor(t, clk); got != c.wait {
				t.Fatalf("waits %v before retrying, want %v", got, c.wait)
			}
			if n := col.requests(); n != 1 {
				t.Fatalf("%d requests before the wait ended, want 1", n)
			}
			clk.Advance(c.wait)
			if err := result(t, done); err != nil {
				t.Fatalf("export = %v, want success on the retry", err)
			}
			if n := col.requests(); n != 2 {
				t.Fatalf("%d requests, want 2", n)
			}
			_, _, first := col.got(t, 1)
			_, _, second := col.got(t, 2)
			if !bytes.Equal(first, second) || len(first) == 0 {
				t.Error("the retry sent another body")
			}
		})
	}
}

// TestBackoffDoublesToItsCapWithinTheTimeout: against a collector that
// always answers 503, the waits are 1 s, 2 s, then 4 s each, until the
// next one would end after the export's timeout (20 s here).
func TestBackoffDoublesToItsCapWithinTheTimeout(t *testing.T) {
	col := startCollector(t, status(503))
	clk := clocktest.New(time.Now())
	o := testOptions(col.URL, clk)
	o.Timeout = 20 * time.Second
	done := exportAsync(context.Background(), newExporter(t, o), 1)
	var waits []time.Duration
	for range 6 {
		d := waitsFor(t, clk)
		waits = append(waits, d)
		clk.Advance(d)
	}
	err := result(t, done)
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	if !slices.Equal(waits, want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "7 attempt") {
		t.Errorf("export = %v, want a failure naming 503 after 7 attempts", err)
	}
	if n := col.requests(); n != 7 {
		t.Errorf("%d requests, want 7", n)
	}
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d waits pending after the export gave up", n)
	}
}

// TestRetryAfterBeyondTheTimeoutFailsAtOnce: a Retry-After the export
// cannot wait out is not waited for.
func TestRetryAfterBeyondTheTimeoutFailsAtOnce(t *testing.T) {
	col := startCollector(t, status(503, "Retry-After", "60"))
	clk := clocktest.New(time.Now())
	err := result(t, exportAsync(context.Background(), newExporter(t, testOptions(col.URL, clk)), 1))
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("export = %v, want a failure naming 503", err)
	}
	if n, p := col.requests(), clk.Pending(); n != 1 || p != 0 {
		t.Errorf("%d requests and %d waits, want 1 and none", n, p)
	}
}

// TestOtherAnswersFailAtOnce: a refusal that a retry will not change fails
// the export after one request. The error says the status; never the
// answer's body, a header's value or the URL's userinfo.
func TestOtherAnswersFailAtOnce(t *testing.T) {
	const canary = "Bearer canary-body-93"
	for _, code := range []int{400, 401, 403, 404, 413, 500, 501} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			col := startCollector(t, func(_ int, w http.ResponseWriter) {
				w.Header().Set("Retry-After", "1")
				w.Header().Set("X-Echo", canary)
				w.WriteHeader(code)
				_, _ = w.Write([]byte("you sent Authorization: " + canary))
			})
			clk := clocktest.New(time.Now())
			o := testOptions(strings.Replace(col.URL, "http://", "http://user:url-password-5@", 1), clk)
			o.Headers = map[string]string{"Authorization": canary}
			err := result(t, exportAsync(context.Background(), newExporter(t, o), 1))
			if err == nil || !strings.Contains(err.Error(), http.StatusText(code)) || !strings.Contains(err.Error(), "127.0.0.1") {
				t.Fatalf("export = %v, want a failure naming the endpoint and %d", err, code)
			}
			for _, secret := range []string{"canary-body", "url-password", "user@"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error %q quotes %q", err, secret)
				}
			}
			if n, p := col.requests(), clk.Pending(); n != 1 || p != 0 {
				t.Errorf("%d requests and %d waits, want 1 and none", n, p)
			}
		})
	}
}

// TestFollowsNoRedirect: a 307 elsewhere is a failed export, even with a
// client whose policy follows redirects; the other host gets nothing.
func TestFollowsNoRedirect(t *testing.T) {
	elsewhere := startCollector(t, nil)
	col := startCollector(t, status(307, "Location", elsewhere.URL))
	err := newExporter(t, testOptions(col.URL, clock.Real{})).ExportSpans(context.Background(), someSpans(1))
	if err == nil || !strings.Contains(err.Error(), "307") {
		t.Fatalf("export = %v, want a failure naming 307", err)
	}
	if n, m := col.requests(), elsewhere.requests(); n != 1 || m != 0 {
		t.Errorf("%d requests to the collector and %d to where it redirected, want 1 and 0", n, m)
	}
}

// TestHangingCollectorIsBounded: a collector that never answers holds an
// export until its context ends, or the exporter's own timeout.
func TestHangingCollectorIsBounded(t *testing.T) {
	for _, c := range []struct {
		name    string
		ctx     time.Duration // 0: no deadline
		timeout time.Duration
	}{
		{"by the context", 200 * time.Millisecond, 10 * time.Second},
		{"by the timeout", 0, 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			var col *collector
			col = startCollector(t, func(int, http.ResponseWriter) { <-col.done })
			o := testOptions(col.URL, clock.Real{})
			o.Timeout = c.timeout
			ctx := context.Background()
			if c.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.ctx)
				defer cancel()
			}
			start := time.Now()
			err := newExporter(t, o).ExportSpans(ctx, someSpans(1))
			// 200 ms wanted; 5 s is a busy machine's margin and half of
			// the 10 s a hang without the bound would at least take.
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the export returned after %v", d)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("export = %v, want the deadline's error", err)
			}
			if n := col.requests(); n != 1 {
				t.Errorf("%d requests, want 1 (a timed-out attempt is not retried)", n)
			}
		})
	}
}

// TestContextEndsTheWaitToRetry: a context cancelled while the exporter
// waits to retry ends the export at once.
func TestContextEndsTheWaitToRetry(t *testing.T) {
	col := startCollector(t, status(503))
	clk := clocktest.New(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := exportAsync(ctx, newExporter(t, testOptions(col.URL, clk)), 1)
	waitsFor(t, clk)
	cancel()
	err := result(t, done)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "503") {
		t.Errorf("export = %v, want the cancellation after a 503", err)
	}
	if n := col.requests(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestShutdownRefusesLaterExports(t *testing.T) {
	col := startCollector(t, nil)
	e := newExporter(t, testOptions(col.URL, clock.Real{}))
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(context.Background(), someSpans(1)); !errors.Is(err, errStopped) {
		t.Errorf("export after shutdown = %v, want %v", err, errStopped)
	}
	if n := col.requests(); n != 0 {
		t.Errorf("%d requests after shutdown, want none", n)
	}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	good := testOptions("http://127.0.0.1:4318/v1/traces", clock.Real{})
	for name, change := range map[string]func(*Options){
		"relative URL":    func(o *Options) { o.URL = "/v1/traces" },
		"other scheme":    func(o *Options) { o.URL = "grpc://127.0.0.1:4317" },
		"no client":       func(o *Options) { o.Client = nil },
		"no clock":        func(o *Options) { o.Clock = nil },
		"no timeout":      func(o *Options) { o.Timeout = 0 },
		"cap below first": func(o *Options) { o.RetryMax = o.RetryFirst / 2 },
	} {
		o := good
		change(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatalf("New(good) = %v", err)
	}
}
