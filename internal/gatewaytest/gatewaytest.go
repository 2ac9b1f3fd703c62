// Package gatewaytest starts a real gateway for tests: assembled by
// gateway.New and run by Gateway.Run exactly as faxgate serve does (proxy and
// admin listeners on loopback, framing sniffer, token manager, policy,
// metrics), in front of a real faxsim on its own listener, with the logs
// captured for inspection.
package gatewaytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/faxsim"
	"github.com/faxgate/faxgate/internal/gateway"
	"github.com/faxgate/faxgate/metrics"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// Key is the API secret every test gateway holds.
const Key = "sk_test_K3y-that-must-never-leak-0123456789"

// Options shape a test gateway.
type Options struct {
	// Config is YAML for every section but upstream (which the harness writes).
	Config string
	// UpstreamTimeout is upstream.timeout; default 5s.
	UpstreamTimeout time.Duration
	// TokenTTL is the simulator's token lifetime; default 24h.
	TokenTTL time.Duration
	// Wrap, when set, wraps the simulator's handler (to misbehave on purpose).
	Wrap func(http.Handler) http.Handler
	// SimKey is the key the simulator accepts; default Key.
	SimKey string
	// NoWait skips waiting for the first token.
	NoWait bool
	// Upstream, when set, is an already running simulator to share (fleet
	// tests); Sim must then be set too.
	Upstream *httptest.Server
	Sim      *faxsim.Sim
	// RedisAddr, when set, makes this gateway share its token through Redis
	// (token.store: redis).
	RedisAddr string
	// RateLimitRedisAddr, when set, makes this gateway share rate limits
	// through the Redis at this address: the harness sets
	// rate_limit.backend: redis (limits and replicas_hint come from Config).
	// With RedisAddr too, both must be the same server: one client serves
	// both, as in faxgate serve.
	RateLimitRedisAddr string
	// RateLimitTimeout bounds each shared rate-limit decision; default
	// policy.DefaultRedisRateTimeout. Tests that measure the shared limit
	// raise it, so a loaded test machine does not send them to the local
	// fallback.
	RateLimitTimeout time.Duration
}

// Gateway is a running test gateway.
type Gateway struct {
	URL      string // http://127.0.0.1:port of the proxy listener
	Addr     string
	AdminURL string // http://127.0.0.1:port of the admin listener
	Sim      *faxsim.Sim
	Upstream *httptest.Server
	// Gateway is the assembled gateway, built by gateway.New as faxgate
	// serve builds it; the fields below are its parts.
	Gateway  *gateway.Gateway
	Handler  *proxy.Handler
	Tokens   *tokencache.Manager
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	Config   *config.Config
	// Client talks to this gateway only; its connections close with the test.
	Client *http.Client
	logs   *SyncBuffer
}

// Start builds and starts a gateway; everything stops at the end of the test.
func Start(t testing.TB, o Options) *Gateway {
	t.Helper()
	if o.UpstreamTimeout == 0 {
		o.UpstreamTimeout = 5 * time.Second
	}
	if o.SimKey == "" {
		o.SimKey = Key
	}
	sim, up := o.Sim, o.Upstream
	if up == nil {
		sim = faxsim.New(faxsim.Options{APIKey: o.SimKey, TokenTTL: o.TokenTTL})
		var h http.Handler = sim
		if o.Wrap != nil {
			h = o.Wrap(sim)
		}
		up = httptest.NewServer(h)
		t.Cleanup(up.Close)
	}

	yaml := fmt.Sprintf("upstream:\n  base_url: %q\n  api_key_env: FG_TEST_KEY\n  timeout: %s\n%s",
		up.URL, o.UpstreamTimeout, o.Config)
	if o.RedisAddr != "" && o.RateLimitRedisAddr != "" && o.RedisAddr != o.RateLimitRedisAddr {
		t.Fatalf("gatewaytest: RedisAddr %s and RateLimitRedisAddr %s differ; a gateway has one Redis", o.RedisAddr, o.RateLimitRedisAddr)
	}
	if o.RedisAddr != "" {
		yaml += fmt.Sprintf("token:\n  store: redis\n  refresh_before: %s\nredis:\n  addrs: [%q]\n",
			refreshBefore(o), o.RedisAddr)
	} else if o.RateLimitRedisAddr != "" {
		yaml += fmt.Sprintf("redis:\n  addrs: [%q]\n", o.RateLimitRedisAddr)
	}
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) {
		if k == "FG_TEST_KEY" {
			return Key, true
		}
		return "", false
	})
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, yaml)
	}
	if o.RateLimitRedisAddr != "" {
		cfg.RateLimit.Backend = "redis"
	}

	// The admin listener and the proxy listener take free loopback ports.
	cfg.Server.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"

	logs := &SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway logs:\n%s", logs.String())
		}
	})
	gl, err := gateway.NewLogs(cfg.Log, logs)
	if err != nil {
		t.Fatalf("loggers: %v", err)
	}
	reg := prometheus.NewRegistry()
	// The same assembly as faxgate serve; only timings that are not
	// configuration are shortened, so outages show in milliseconds.
	gw, err := gateway.New(cfg, gateway.Deps{
		Logs: gl, Registry: reg, Clock: tokencache.RealClock{}, Version: "test",
		Getenv: func(k string) (string, bool) {
			if k == "FG_TEST_KEY" {
				return Key, true
			}
			return "", false
		},
		TokenLeaseTTL:    2 * time.Second,
		RedisOpTimeout:   500 * time.Millisecond,
		RateLimitTimeout: o.RateLimitTimeout,
	})
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- gw.Run(context.Background(), gateway.RunOptions{Ready: func(p, a string) { addrs <- [2]string{p, a} }})
	}()
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("gateway did not start: %v", err)
	}
	t.Cleanup(func() { _ = gw.Close(); <-done })

	g := &Gateway{URL: "http://" + a[0], Addr: a[0], AdminURL: "http://" + a[1], Sim: sim, Upstream: up,
		Gateway: gw, Handler: gw.Handler, Tokens: gw.Tokens, Registry: reg, Metrics: gw.Metrics, Config: cfg, logs: logs}
	ctr := &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}
	t.Cleanup(ctr.CloseIdleConnections)
	g.Client = &http.Client{Transport: ctr, Timeout: 30 * time.Second}
	if !o.NoWait {
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		if _, err := gw.Tokens.Token(wctx); err != nil {
			t.Fatalf("no first token: %v", err)
		}
	}
	return g
}

// refreshBefore suits the simulator's token lifetime: short test tokens are
// renewed in their second half anyway.
func refreshBefore(o Options) time.Duration {
	if o.TokenTTL > 0 && o.TokenTTL < 2*time.Hour {
		return o.TokenTTL / 5
	}
	return time.Hour
}

// Do sends a request to the gateway and returns the response with its body read.
func (g *Gateway) Do(t testing.TB, method, path string, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, g.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
		req.ContentLength = 0
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	// hdr names replace the defaults above; a name given twice is sent twice.
	seen := map[string]bool{}
	for i := 0; i+1 < len(hdr); i += 2 {
		if k := http.CanonicalHeaderKey(hdr[i]); !seen[k] {
			seen[k] = true
			req.Header.Del(k)
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp, b.String()
}

// Raw writes raw bytes on a new TCP connection and returns everything the
// gateway answers until it closes the connection or the timeout passes.
func (g *Gateway) Raw(t testing.TB, raw string, timeout time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(c)
	return out.String()
}

// Logs returns every log line written so far.
func (g *Gateway) Logs() string { return g.logs.String() }

// LogLines returns the log lines whose msg is msg, decoded.
func (g *Gateway) LogLines(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(g.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Envelope decodes a gateway error body.
func Envelope(t testing.TB, body string) (status int, message, code string) {
	t.Helper()
	var e struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not a JSON envelope: %q", body)
	}
	return e.Status, e.Message, e.Error
}

// SyncBuffer is an io.Writer that the gateway's goroutines and a test can
// use at once (captured logs, stderr).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
