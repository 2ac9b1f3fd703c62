package proxy_test

import (
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// resetFront is a TCP front for an upstream: it forwards every connection,
// except that the next n it accepts are reset at once, before a TLS
// handshake could begin (a connection the upstream never saw).
type resetFront struct {
	ln     net.Listener
	target string
	reset  atomic.Int32
	resets atomic.Int32
}

func startResetFront(t *testing.T, target string) *resetFront {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &resetFront{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if f.reset.Add(-1) >= 0 {
				f.resets.Add(1)
				_ = c.(*net.TCPConn).SetLinger(0) // RST, not FIN
				c.Close()
				continue
			}
			f.reset.Store(0)
			go f.pipe(c)
		}
	}()
	return f
}

func (f *resetFront) pipe(c net.Conn) {
	defer c.Close()
	u, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	defer u.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = io.Copy(u, c); _ = u.(*net.TCPConn).CloseWrite() }()
	_, _ = io.Copy(c, u)
	wg.Wait()
}

// retryCallers: one caller, limits far above the tests' traffic.
const retryCallers = `
callers:
  list:
    - { name: svc, cidrs: ["127.0.0.0/8"], allow: ["*"] }
rate_limit:
  default: { rps: 100000, burst: 100000 }
`

// TestUnsentRequestIsSentAgain: connections reset before the TLS handshake
// never reached the upstream: the request, body and all, is sent again and
// answered as if nothing happened; each attempt is counted, and a request
// whose resends run out is a 502.
func TestUnsentRequestIsSentAgain(t *testing.T) {
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key})
	up := httptest.NewTLSServer(sim)
	t.Cleanup(up.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	front := startResetFront(t, strings.TrimPrefix(up.URL, "https://"))
	frontUp := &httptest.Server{URL: "https://" + front.ln.Addr().String()}
	g := gatewaytest.Start(t, gatewaytest.Options{Config: retryCallers, Sim: sim, Upstream: frontUp,
		UpstreamYAML: fmt.Sprintf("  ca_file: %q\n  retry_unsent: 2\n", ca)})

	for _, tc := range []struct {
		resets, status, attempts int
	}{
		{resets: 2, status: 200, attempts: 3},
		{resets: 3, status: 502, attempts: 3},
	} {
		g.Gateway.CloseIdleConnections()
		front.reset.Store(int32(tc.resets))
		before := sim.RouteCounts()["POST /v1/contacts/create"]
		resp, body := g.Do(t, "POST", "/v1/contacts/create", `{"first_name":"Ada","last_name":"Lovelace","phone":"+15550100"}`,
			"Content-Type", "application/json")
		if resp.StatusCode != tc.status {
			t.Fatalf("%d resets: %d %s, want %d", tc.resets, resp.StatusCode, body, tc.status)
		}
		if line := g.LastAccessLine(t, "contacts.create"); line["attempts"] != float64(tc.attempts) {
			t.Errorf("%d resets: attempts %v, want %d", tc.resets, line["attempts"], tc.attempts)
		}
		want := 0
		if tc.status == 200 {
			want = 1
		}
		if got := sim.RouteCounts()["POST /v1/contacts/create"] - before; got != want {
			t.Errorf("%d resets: the upstream got the request %d times, want %d", tc.resets, got, want)
		}
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.UpstreamRetries.WithLabelValues("contacts.create", "unsent")); got != 4 {
		t.Errorf("faxgate_upstream_retries_total{unsent} = %v, want 4", got)
	}
}

// TestMaybeSentIsNotSentAgain: an upstream that reads the request and then
// resets the connection may have acted on it: a POST is never sent again
// (502), a GET without a body is, once.
func TestMaybeSentIsNotSentAgain(t *testing.T) {
	var seen sync.Map // path -> *atomic.Int32
	g := gatewaytest.Start(t, gatewaytest.Options{Config: retryCallers, Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/auth" {
				next.ServeHTTP(w, r)
				return
			}
			n, _ := seen.LoadOrStore(r.Method+" "+r.URL.Path, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		})
	}})
	count := func(k string) int32 {
		n, ok := seen.Load(k)
		if !ok {
			return 0
		}
		return n.(*atomic.Int32).Load()
	}
	resp, _ := g.Do(t, "POST", "/v1/contacts/create", `{"first_name":"Ada"}`, "Content-Type", "application/json")
	if resp.StatusCode != 502 || count("POST /v1/contacts/create") != 1 {
		t.Errorf("POST reset after it was read: %d, upstream saw it %d times; want 502, once", resp.StatusCode, count("POST /v1/contacts/create"))
	}
	if line := g.LastAccessLine(t, "contacts.create"); line["attempts"] != 1.0 {
		t.Errorf("POST: attempts %v, want 1", line["attempts"])
	}
	resp, _ = g.Do(t, "GET", "/v1/esign_templates", "")
	if resp.StatusCode != 502 || count("GET /v1/esign_templates") != 2 {
		t.Errorf("GET reset after it was read: %d, upstream saw it %d times; want 502, twice", resp.StatusCode, count("GET /v1/esign_templates"))
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.UpstreamRetries.WithLabelValues("esign.templates.list", "reset")); got != 1 {
		t.Errorf("faxgate_upstream_retries_total{reset} = %v, want 1", got)
	}
}

// TestVendor429IsWaitedOut: with retry_throttled, the request the vendor
// answers 429 holds the route, waits out its Retry-After at the head of the
// hold's queue and is sent again: the caller gets the answer, never the
// 429. A Retry-After beyond max_wait, or retry_throttled off, relays the
// 429 unchanged.
func TestVendor429IsWaitedOut(t *testing.T) {
	var throttle atomic.Int32 // 429s to answer; Retry-After in seconds from retryAfter
	var retryAfter atomic.Value
	retryAfter.Store("1")
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/auth" && throttle.Add(-1) >= 0 {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Retry-After", retryAfter.Load().(string))
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = io.WriteString(w, `{"status":0,"message":"Too Many Attempts."}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	for _, tc := range []struct {
		name          string
		retry         string
		retryThrottle bool
		want          int
	}{
		{"waited out", "1", true, 200},
		{"beyond max_wait", "30", true, 429},
		{"retry_throttled off", "1", false, 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := retryCallers + "upstream_budget:\n  max_wait: 5s\n"
			if tc.retryThrottle {
				cfg += "  retry_throttled: true\n"
			}
			g := gatewaytest.Start(t, gatewaytest.Options{Config: cfg, Wrap: wrap})
			retryAfter.Store(tc.retry)
			throttle.Store(1)
			before := g.Sim.RouteCounts()["POST /v1/contacts/create"]
			start := time.Now()
			resp, body := g.Do(t, "POST", "/v1/contacts/create", `{"first_name":"Ada","last_name":"Lovelace","phone":"+15550100"}`,
				"Content-Type", "application/json")
			took := time.Since(start)
			if resp.StatusCode != tc.want {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tc.want)
			}
			line := g.LastAccessLine(t, "contacts.create")
			retried := testutil.ToFloat64(g.Metrics.Proxy.UpstreamRetries.WithLabelValues("contacts.create", "throttled"))
			if tc.want == 429 {
				if body != `{"status":0,"message":"Too Many Attempts."}` || line["attempts"] != 1.0 || retried != 0 {
					t.Errorf("the vendor's 429 was not relayed unchanged: %q, attempts %v, retries %v", body, line["attempts"], retried)
				}
				return
			}
			if line["attempts"] != 2.0 || retried != 1 || line["wait_ms"].(float64) < 900 || took < 900*time.Millisecond {
				t.Errorf("attempts %v, retries %v, wait_ms %v after %v; want 2, 1, about a second", line["attempts"], retried, line["wait_ms"], took)
			}
			if got := g.Sim.RouteCounts()["POST /v1/contacts/create"] - before; got != 1 {
				t.Errorf("the simulator served the request %d times after the 429, want once", got)
			}
		})
	}
}
