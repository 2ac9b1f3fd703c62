package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// countPath counts the requests for path that reached the upstream.
func countPath(sim *faxsim.Sim, path string) int {
	n := 0
	for _, r := range sim.Requests() {
		if r.Path == path {
			n++
		}
	}
	return n
}

type result struct {
	code int
	body string
	err  error
	at   time.Time // when the response (or the error) arrived
}

// fire sends n concurrent contacts.list requests through the proxy and waits
// until all of them reached the upstream, so they are in flight in the gateway.
func fire(t *testing.T, g *gateway, up *upstream, n int) <-chan result {
	t.Helper()
	before := countPath(up.sim, "/v1/contacts/list")
	c := newClient(t)
	results := make(chan result, n)
	for range n {
		go func() {
			code, body, err := postJSON(c, g.proxyURL+"/v1/contacts/list", `{}`)
			results <- result{code, body, err, time.Now()}
		}()
	}
	eventually.Eventually(t, 5*time.Second, "the requests to reach the upstream", func() bool {
		return countPath(up.sim, "/v1/contacts/list")-before >= n
	})
	return results
}

// TestGracefulShutdown is the drain docs/deployment.md promises: on SIGTERM
// readiness goes false at once, the listener stops accepting, every in-flight
// request finishes, and the process exits 0.
func TestGracefulShutdown(t *testing.T) {
	// latency/2, the time readiness and the listener get to turn, holds
	// on a busy machine: they turn in microseconds.
	const (
		n       = 20
		latency = 2 * time.Second
		budget  = 10 * time.Second
	)
	up := startUpstream(t, testKey)
	g := startServe(t, writeConfig(t, serveOpts{baseURL: up.srv.URL, shutdownTimeout: budget}), nil)
	g.waitReady(t)
	up.sim.SetLatency(latency)
	results := fire(t, g, up, n)

	cancelAt := time.Now()
	g.cancel() // what SIGTERM does to main's context

	// Readiness goes false at once, served by the admin listener while the
	// proxy drains.
	admin := newClient(t)
	var notReadyAt time.Time
	var readyBody string
	eventually.Eventually(t, latency/2, "/readyz to answer 503 after cancel", func() bool {
		resp, err := admin.Get(g.adminURL + "/readyz")
		if err != nil {
			t.Fatalf("/readyz during the drain: %v (the admin listener must keep serving)", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return false
		}
		notReadyAt = time.Now()
		var r struct {
			Ready  bool   `json:"ready"`
			Reason string `json:"reason"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Ready || r.Reason == "" {
			t.Errorf("/readyz 503 body: ready %v reason %q (%v), want ready false with a reason", r.Ready, r.Reason, err)
		}
		readyBody = r.Reason
		return true
	})
	t.Logf("readyz 503 %v after cancel (reason %q)", notReadyAt.Sub(cancelAt), readyBody)

	// The listener stops accepting: a new connection is refused.
	var refusedAt time.Time
	eventually.Eventually(t, latency/2, "the proxy listener to refuse connections", func() bool {
		conn, err := net.DialTimeout("tcp", g.proxyAddr, 100*time.Millisecond)
		if err != nil {
			refusedAt = time.Now()
			return true
		}
		conn.Close()
		return false
	})
	if _, _, err := postJSON(newClient(t), g.proxyURL+"/v1/contacts/list", `{}`); err == nil {
		t.Errorf("a request on a new connection after cancel was served")
	}

	// The drain is observable on the admin listener.
	code, body := get(t, g.adminURL+"/metrics", nil)
	if code != http.StatusOK || !strings.Contains(body, "faxgate_inflight_requests 20\n") {
		t.Errorf("/metrics during the drain = %d, want 200 with faxgate_inflight_requests 20", code)
	}

	// No accepted request is dropped.
	firstDone := time.Time{}
	for i := range n {
		select {
		case r := <-results:
			if r.err != nil || r.code != http.StatusOK {
				t.Errorf("in-flight request %d: %d %v %s, want 200", i, r.code, r.err, r.body)
				continue
			}
			if st, _, _ := gatewaytest.Envelope(t, r.body); st != 1 {
				t.Errorf("in-flight request %d: body %s, want status 1", i, r.body)
			}
			if firstDone.IsZero() || r.at.Before(firstDone) {
				firstDone = r.at
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d in-flight requests completed", i, n)
		}
	}
	if !firstDone.IsZero() && (firstDone.Before(notReadyAt) || firstDone.Before(refusedAt)) {
		t.Errorf("a request completed before readiness flipped or the listener closed; the checks prove nothing")
	}

	code2 := g.wait(t, budget)
	stopped := time.Since(cancelAt)
	t.Logf("run returned %d %v after cancel", code2, stopped)
	if code2 != 0 {
		t.Errorf("run = %d, want 0\nstderr:\n%s", code2, g.stderr.String())
	}
	logs := g.stderr.String()
	for _, msg := range []string{`"msg":"shutting down"`, `"msg":"stopped"`} {
		if !strings.Contains(logs, msg) {
			t.Errorf("stderr lacks %s", msg)
		}
	}
}

// TestShutdownBudgetExceeded: requests slower than shutdown_timeout are cut
// off when the budget runs out, and run reports it with exit 1.
func TestShutdownBudgetExceeded(t *testing.T) {
	const budget = 200 * time.Millisecond
	up := startUpstream(t, testKey)
	g := startServe(t, writeConfig(t, serveOpts{baseURL: up.srv.URL, shutdownTimeout: budget}), nil)
	g.waitReady(t)
	up.sim.SetLatency(5 * time.Second)
	results := fire(t, g, up, 5)

	start := time.Now()
	g.cancel()
	code := g.wait(t, 3*time.Second)
	took := time.Since(start)
	t.Logf("run returned %d after %v", code, took)
	if code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	if took < budget {
		t.Errorf("run returned after %v, before the %v drain budget", took, budget)
	}
	var drainLines []string
	for _, l := range lines(g.stderr.String()) {
		if strings.Contains(l, "drain budget") && !strings.HasPrefix(l, "{") {
			drainLines = append(drainLines, l)
		}
	}
	if want := "faxgate: drain budget of 200ms ran out with requests in flight"; len(drainLines) != 1 || drainLines[0] != want {
		t.Errorf("stderr reason lines = %q, want [%q]", drainLines, want)
	}
	if strings.Contains(g.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("logged stopped although the drain failed")
	}
	for i := range 5 {
		select {
		case r := <-results:
			if r.err == nil && r.code == http.StatusOK {
				t.Errorf("request %d got 200, but the upstream was to answer after 5s", i)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("request %d still hanging after the gateway stopped", i)
		}
	}
}

// TestSignal starts the real program (this test binary running main) and
// stops it with a real signal while a request is in flight.
func TestSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			up := startUpstream(t, testKey)
			cmd := exec.Command(os.Args[0], "serve", "--config", writeConfig(t, serveOpts{baseURL: up.srv.URL}))
			// A -race child would sleep 1s at exit (GORACE atexit_sleep_ms).
			cmd.Env = append(os.Environ(), "FAXGATE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			// Lines of the child's stderr; the first "faxgate serving" names
			// the listeners.
			var mu sync.Mutex
			var logs []string
			addrs := make(chan [2]string, 1)
			eof := make(chan struct{})
			go func() {
				defer close(eof)
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					mu.Lock()
					logs = append(logs, sc.Text())
					mu.Unlock()
					var l struct{ Msg, Proxy, Admin string }
					if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "faxgate serving" {
						addrs <- [2]string{l.Proxy, l.Admin}
					}
				}
			}()
			g := &gateway{stderr: &syncBuffer{}}
			select {
			case a := <-addrs:
				g.proxyAddr, g.proxyURL, g.adminURL = a[0], "http://"+a[0], "http://"+a[1]
			case <-eof:
				t.Fatalf("faxgate exited before serving: %q", logs)
			case <-time.After(10 * time.Second):
				t.Fatalf("faxgate not serving after 10s")
			}
			g.waitReady(t)
			up.sim.SetLatency(300 * time.Millisecond)
			results := fire(t, g, up, 1)

			sent := time.Now()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if r := <-results; r.err != nil || r.code != http.StatusOK {
				t.Errorf("in-flight request: %d %v, want 200", r.code, r.err)
			}
			exited := make(chan error, 1)
			go func() { <-eof; exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("faxgate exit: %v, want exit status 0", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("faxgate still running 5s after %v", sig)
			}
			t.Logf("exited %v after %v", sig, time.Since(sent))
			mu.Lock()
			defer mu.Unlock()
			if len(logs) == 0 || !strings.Contains(logs[len(logs)-1], `"msg":"stopped"`) {
				t.Errorf("last stderr line is not the stopped log: %q", logs)
			}
			for _, l := range logs {
				if !json.Valid([]byte(l)) {
					t.Errorf("stderr line is not JSON: %q", l)
				}
				if strings.Contains(l, testKey) {
					t.Errorf("stderr holds the API key")
				}
			}
		})
	}
}
