package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// testKey is the API secret of the test upstreams; no output may hold it.
const testKey = "sk_test_cmd-K3y-never-printed-0123456789"

// TestMain doubles as the faxgate binary: with FAXGATE_TEST_MAIN=1 the test
// binary runs main() with its own arguments, so a test can start the real
// program (signals, exit code, stderr) without a separate go build.
func TestMain(m *testing.M) {
	if os.Getenv("FAXGATE_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// syncBuffer is an io.Writer safe for the gateway's goroutines and the test.
type syncBuffer = gatewaytest.SyncBuffer

// mapEnv is an env.getenv over a fixed map.
func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// runResult is what a finished run returned and printed.
type runResult struct {
	code           int
	stdout, stderr string
}

// runCmd runs a command that is expected to end by itself (check, version,
// failing serves) and bounds how long it may take.
func runCmd(t *testing.T, getenv func(string) (string, bool), args ...string) runResult {
	t.Helper()
	if getenv == nil { // main always passes os.LookupEnv
		getenv = mapEnv(nil)
	}
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, env{stdout: &stdout, stderr: &stderr, getenv: getenv}) }()
	select {
	case code := <-done:
		return runResult{code, stdout.String(), stderr.String()}
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatalf("faxgate %s did not end within 10s\nstderr:\n%s", strings.Join(args, " "), stderr.String())
		return runResult{}
	}
}

// upstream is a faxsim served by httptest.
type upstream struct {
	sim *faxsim.Sim
	srv *httptest.Server
}

func startUpstream(t *testing.T, key string) *upstream {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: key})
	srv := httptest.NewServer(sim)
	t.Cleanup(func() {
		sim.SetLatency(0)
		srv.CloseClientConnections()
		srv.Close()
	})
	return &upstream{sim: sim, srv: srv}
}

// serveOpts shape a config for faxgate serve.
type serveOpts struct {
	baseURL         string
	keyFile         string // written with testKey when empty and keyEnv is empty
	keyEnv          string
	pprof           bool
	shutdownTimeout time.Duration
}

// writeConfig writes a serve config into a temp dir and returns its path.
func writeConfig(t *testing.T, o serveOpts) string {
	t.Helper()
	dir := t.TempDir()
	if o.shutdownTimeout == 0 {
		o.shutdownTimeout = 10 * time.Second
	}
	keyLine := fmt.Sprintf("api_key_env: %s", o.keyEnv)
	if o.keyEnv == "" {
		if o.keyFile == "" {
			o.keyFile = filepath.Join(dir, "api-key")
			if err := os.WriteFile(o.keyFile, []byte(testKey+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		keyLine = fmt.Sprintf("api_key_file: %q", o.keyFile)
	}
	cfg := fmt.Sprintf(`server:
  listen: "127.0.0.1:0"
  shutdown_timeout: %s
admin:
  listen: "127.0.0.1:0"
  pprof: %v
upstream:
  base_url: %q
  %s
  timeout: 20s
token:
  retry_min: 50ms
  retry_max: 200ms
callers:
  list:
    - name: local
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
      rate_limit: { rps: 1000, burst: 1000 }
`, o.shutdownTimeout, o.pprof, o.baseURL, keyLine)
	path := filepath.Join(dir, "faxgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// gateway is a `faxgate serve` running inside the test.
type gateway struct {
	proxyURL, adminURL string
	proxyAddr          string
	stderr             *syncBuffer
	cancel             context.CancelFunc // what SIGTERM does to main
	done               chan int           // run's exit code
}

// startServe runs `faxgate serve --config path` and waits until it listens.
func startServe(t *testing.T, path string, getenv func(string) (string, bool)) *gateway {
	t.Helper()
	if getenv == nil {
		getenv = mapEnv(nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &gateway{stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	addrs := make(chan [2]string, 1)
	e := env{stdout: io.Discard, stderr: g.stderr, getenv: getenv,
		ready: func(p, a string) { addrs <- [2]string{p, a} }}
	go func() { g.done <- run(ctx, []string{"serve", "--config", path}, e) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
		case <-time.After(15 * time.Second):
			t.Errorf("faxgate serve did not stop within 15s of cancel")
		}
	})
	select {
	case a := <-addrs:
		g.proxyAddr = a[0]
		g.proxyURL, g.adminURL = "http://"+a[0], "http://"+a[1]
	case code := <-g.done:
		g.done <- code
		t.Fatalf("faxgate serve exited %d before it was ready\nstderr:\n%s", code, g.stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("faxgate serve not listening after 10s\nstderr:\n%s", g.stderr.String())
	}
	return g
}

// waitReady polls /readyz until it answers 200.
func (g *gateway) waitReady(t *testing.T) {
	t.Helper()
	eventually.EventuallyErr(t, 10*time.Second, "/readyz to answer 200", func() error {
		if code, body := get(t, g.adminURL+"/readyz", nil); code != http.StatusOK {
			return fmt.Errorf("last answer %d %s\nstderr:\n%s", code, body, g.stderr.String())
		}
		return nil
	})
}

// wait returns run's exit code, failing the test after max.
func (g *gateway) wait(t *testing.T, max time.Duration) int {
	t.Helper()
	select {
	case code := <-g.done:
		g.done <- code // for the cleanup
		return code
	case <-time.After(max):
		t.Fatalf("run did not return within %v\nstderr:\n%s", max, g.stderr.String())
		return -1
	}
}

// newClient is an HTTP client with its own connections, closed with the test.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// get does a GET with optional headers and returns status and body.
func get(t *testing.T, url string, hdr http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// postJSON POSTs body and returns status and body.
func postJSON(c *http.Client, url, body string) (int, string, error) {
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
