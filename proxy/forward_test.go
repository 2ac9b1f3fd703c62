package proxy_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// upstreamHeaders records the request headers its path got and answers
// with the headers the test sets.
type upstreamHeaders struct {
	mu   sync.Mutex
	got  http.Header
	answ map[string][]string
}

func (u *upstreamHeaders) wrap(path string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != path {
				next.ServeHTTP(w, r)
				return
			}
			u.mu.Lock()
			u.got = r.Header.Clone()
			for k, vs := range u.answ {
				w.Header()[k] = vs
			}
			u.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"status":1}`)
		})
	}
}

// The upstream gets no User-Agent when the caller sent none (not Go's),
// and the caller's when it sent one; the upstream's hop-by-hop headers,
// and those its Connection names, do not reach the caller; an upstream
// header the gateway also sets is added to the gateway's, never replaces
// it; the upstream's X-Request-Id never replaces the gateway's.
func TestForwardHeaders(t *testing.T) {
	u := &upstreamHeaders{answ: map[string][]string{
		"Connection":      {"X-Hop-Named"},
		"X-Hop-Named":     {"1"},
		"Keep-Alive":      {"timeout=5"},
		"Te":              {"trailers"},
		"X-Kept":          {"a", "b"},
		"X-Request-Id":    {"from-upstream"},
		"Ratelimit-Limit": {"7"},
	}}
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers, Wrap: u.wrap("/v1/esign_templates")})

	out := g.Raw(t, "GET /v1/esign_templates HTTP/1.1\r\nHost: x\r\nX-Request-Id: req-1\r\nConnection: close\r\n\r\n", 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 200 ") {
		t.Fatalf("answer: %q", out)
	}
	u.mu.Lock()
	got := u.got
	u.mu.Unlock()
	if vs, ok := got["User-Agent"]; ok {
		t.Errorf("the caller sent no User-Agent; the upstream got %q", vs)
	}
	head, _, _ := strings.Cut(out, "\r\n\r\n")
	for _, bad := range []string{"X-Hop-Named", "Keep-Alive", "\r\nTe:", "from-upstream"} {
		if strings.Contains(head, bad) {
			t.Errorf("the caller got %q:\n%s", bad, head)
		}
	}
	for _, want := range []string{"\r\nX-Kept: a\r\nX-Kept: b\r\n", "\r\nX-Request-Id: req-1\r\n", "\r\nRatelimit-Limit: 7\r\n"} {
		if !strings.Contains(head, want) {
			t.Errorf("the caller did not get %q:\n%s", want, head)
		}
	}
	if strings.Count(head, "Ratelimit-Limit:") != 2 {
		t.Errorf("want the gateway's RateLimit-Limit and the upstream's, both:\n%s", head)
	}

	resp, _ := g.Do(t, "GET", "/v1/esign_templates", "", "User-Agent", "billing/1.2")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	u.mu.Lock()
	got = u.got
	u.mu.Unlock()
	if v := got.Values("User-Agent"); len(v) != 1 || v[0] != "billing/1.2" {
		t.Errorf("upstream User-Agent = %q, want the caller's", v)
	}
}

// An answer that breaks off after its head is not passed off as whole:
// the caller's connection is aborted, with a declared length or chunked,
// and after more than the 4 KiB a whole answer's connection holds
// (listener.Conn.HoldWrites).
func TestBrokenAnswerAbortsTheCallersConnection(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers, Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/faxes/download" {
				next.ServeHTTP(w, r)
				return
			}
			job := r.URL.Query().Get("job_id")
			if job != "chunked" {
				w.Header().Set("Content-Length", "100000")
			}
			w.Header().Set("Content-Type", "application/pdf")
			_, _ = io.WriteString(w, "%PDF-1.7 a start")
			if job == "sized, past 4 KiB" {
				_, _ = io.WriteString(w, strings.Repeat("x", 20000))
			}
			http.NewResponseController(w).Flush()
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = c.Close()
			}
		})
	}})
	for _, job := range []string{"sized", "sized, past 4 KiB", "chunked"} {
		resp, err := g.Client.Get(g.URL + "/v1/faxes/download?job_id=" + url.QueryEscape(job))
		if err != nil {
			continue // aborted before the head went out (a sized answer is read whole first)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("%s: the caller read %d bytes and a clean end of a broken answer", job, len(body))
		}
	}
}

// An event stream of known length is flushed as it comes, like an
// answer of unknown length.
func TestEventStreamIsFlushed(t *testing.T) {
	g, release := slowDownload(t, http.Header{"Content-Type": {" Text/Event-Stream ; charset=utf-8"}, "Content-Length": {"22"}},
		"data: one\n\n", "data: two\n\n")
	resp, err := g.Client.Get(g.URL + "/v1/faxes/download?job_id=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantStreamed(t, resp.Body, "data: one\n\n", "data: two\n\n", release)
}

// slowDownload starts a gateway whose upstream answers GET
// /v1/faxes/download with header, first (flushed), and second once release
// is closed.
func slowDownload(t *testing.T, header http.Header, first, second string) (*gatewaytest.Gateway, chan struct{}) {
	release := make(chan struct{})
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers, Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/faxes/download" {
				next.ServeHTTP(w, r)
				return
			}
			for k, vs := range header {
				w.Header()[k] = vs
			}
			_, _ = io.WriteString(w, first)
			http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
			_, _ = io.WriteString(w, second)
		})
	}})
	return g, release
}

// wantStreamed reads first from body while the upstream holds the rest back
// until release is closed: first must arrive before that.
func wantStreamed(t *testing.T, body io.Reader, first, rest string, release chan struct{}) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, len(first))
		n, _ := io.ReadFull(body, buf)
		got <- string(buf[:n])
	}()
	select {
	case s := <-got:
		if s != first {
			t.Fatalf("first part = %q, want %q", s, first)
		}
	case <-time.After(3 * time.Second):
		close(release)
		t.Fatal("the first part did not reach the caller before the upstream finished: the answer was held back")
	}
	close(release)
	b, _ := io.ReadAll(body)
	if string(b) != rest {
		t.Fatalf("rest = %q, want %q", b, rest)
	}
}
