// Package gatewaytest starts a real gateway for tests: assembled by
// gateway.New and run by Gateway.Run exactly as faxgate serve does (proxy and
// admin listeners on loopback, framing sniffer, token manager, policy,
// metrics), in front of a real faxsim on its own listener, with the logs
// captured for inspection.
package gatewaytest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/app/gateway"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// Key is the API secret every test gateway holds.
const Key = "sk_test_K3y-that-must-never-leak-0123456789"

// RedisOpTimeout bounds each shared token store operation of a test
// gateway: a request that waited on Redis would take at least this long.
const RedisOpTimeout = 500 * time.Millisecond

// Options shape a test gateway.
type Options struct {
	// Config is YAML for every section but upstream (which the harness writes).
	Config string
	// UpstreamTimeout is upstream.timeout; default 5s.
	UpstreamTimeout time.Duration
	// Shadow, when set, is a shadow candidate: YAML for every section but
	// upstream, made into a file as Config is, named by the live file's
	// shadow.config_file (RewriteShadow changes it).
	Shadow string
	// UpstreamYAML is more of the upstream section, which the harness
	// writes ("  proxy_url: ...\n"), indented as keys of it.
	UpstreamYAML string
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
	// limit.DefaultRedisRateTimeout. Tests that measure the shared limit
	// raise it, so a loaded test machine does not send them to the local
	// fallback.
	RateLimitTimeout time.Duration

	// Redis, when set, is the Redis topology this gateway shares everything
	// through: the token (token.store: redis), the rate limits, budget
	// windows and holds (rate_limit.backend: redis). It replaces RedisAddr
	// and RateLimitRedisAddr.
	Redis *Redis

	// RedisPassword, when set, is the password of the Redis at RedisAddr
	// or RateLimitRedisAddr (redis.password_env names a variable holding it).
	RedisPassword string
	// Env holds more environment variables for the gateway (its config's
	// ${NAME} and the variables it names), beside the API key's.
	Env map[string]string

	// TLS, when set, serves the proxy listener over TLS: the harness
	// writes server.tls (mode files), so Config must have no server.tls.
	TLS *TLS

	// Clock is the gateway's clock (token renewal, holds, waits, rate
	// limits); default the real one. Gateways of one fleet share theirs.
	Clock clock.Clock

	// ConfigFile runs the gateway from a config file, as faxgate serve
	// does: reloaded on RewriteConfig and whenever its content changes
	// (polled every 50ms). The harness writes the file with the loopback
	// listen addresses in it, so Config sets neither; RateLimitRedisAddr
	// is not supported with it.
	ConfigFile bool
}

// TLS is the proxy listener's TLS for a test gateway.
type TLS struct {
	// CertFile and KeyFile are server.tls.cert_file/key_file.
	CertFile, KeyFile string
	// ClientCAFile and ClientAuth are server.tls.client_ca_file/client_auth.
	ClientCAFile, ClientAuth string
	// MinVersion is server.tls.min_version; default 1.2.
	MinVersion string
	// RootCAs is what the gateway's clients (Client, Raw, Dial) trust.
	RootCAs *x509.CertPool
	// ClientCert, when set, is presented by Client, Raw and Dial.
	ClientCert *tls.Certificate
	// PollEvery is how often the certificate files are polled; default 50ms.
	PollEvery time.Duration
	// HTTP1 makes Client speak HTTP/1.1; by default it negotiates h2.
	HTTP1 bool
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
	Metrics  *gateway.Metrics
	Config   *config.Config
	// Client talks to this gateway only; its connections close with the test.
	Client *http.Client
	logs   *SyncBuffer
	tls    *TLS

	configPath  string              // with Options.ConfigFile
	shadowPath  string              // with Options.Shadow
	buildShadow func(string) string // the candidate file's content for a Shadow
	buildYAML   func(string) string // the file's content for a Config
	reload      chan struct{}

	drain    context.CancelFunc
	done     <-chan error
	stopOnce sync.Once
	runErr   error
}

// Shutdown ends Run's context, as SIGTERM does in faxgate serve (readiness
// goes, the listener stops accepting, requests in flight finish), and
// returns what Run returned. Later calls return the same.
func (g *Gateway) Shutdown() error {
	g.stopOnce.Do(func() {
		g.drain()
		g.runErr = <-g.done
	})
	return g.runErr
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
	if o.Clock == nil {
		o.Clock = clock.Real{}
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

	if o.Redis != nil && (o.RedisAddr != "" || o.RateLimitRedisAddr != "" || o.RedisPassword != "") {
		t.Fatal("gatewaytest: Redis replaces RedisAddr, RateLimitRedisAddr and RedisPassword")
	}
	if o.RedisAddr != "" && o.RateLimitRedisAddr != "" && o.RedisAddr != o.RateLimitRedisAddr {
		t.Fatalf("gatewaytest: RedisAddr %s and RateLimitRedisAddr %s differ; a gateway has one Redis", o.RedisAddr, o.RateLimitRedisAddr)
	}
	if o.ConfigFile && o.RateLimitRedisAddr != "" {
		t.Fatal("gatewaytest: ConfigFile does not support RateLimitRedisAddr")
	}
	if o.TLS != nil && o.TLS.PollEvery == 0 {
		o.TLS.PollEvery = 50 * time.Millisecond
	}
	var shadowPath string
	if o.Shadow != "" {
		shadowPath = filepath.Join(t.TempDir(), "candidate.yaml")
		if err := os.WriteFile(shadowPath, []byte(buildYAML(o, up.URL, o.Shadow)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	build := func(config string) string {
		y := buildYAML(o, up.URL, config)
		if shadowPath != "" && !strings.Contains("\n"+config, "\nshadow:") {
			y = inSection(y, "shadow", fmt.Sprintf("  config_file: %q\n", shadowPath))
		}
		return y
	}
	yaml := build(o.Config)
	var configPath string
	if o.ConfigFile {
		configPath = filepath.Join(t.TempDir(), "faxgate.yaml")
		if err := os.WriteFile(configPath, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if o.RedisPassword != "" && (o.RedisAddr != "" || o.RateLimitRedisAddr != "") {
		yaml += "  password_env: FG_TEST_REDIS_PASSWORD\n"
	}
	getenv := func(k string) (string, bool) {
		if k == "FG_TEST_KEY" {
			return Key, true
		}
		if k == "FG_TEST_REDIS_PASSWORD" && o.RedisPassword != "" {
			return o.RedisPassword, true
		}
		if r := o.Redis; r != nil && k == "FG_TEST_REDIS_PASSWORD" && r.Password != "" {
			return r.Password, true
		}
		if r := o.Redis; r != nil && k == "FG_TEST_REDIS_SENTINEL_PASSWORD" && r.SentinelPassword != "" {
			return r.SentinelPassword, true
		}
		v, ok := o.Env[k]
		return v, ok
	}
	cfg, err := config.Parse([]byte(yaml), getenv)
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, yaml)
	}
	if o.RateLimitRedisAddr != "" {
		cfg.RateLimit.Backend = "redis"
	}
	cand, err := config.LoadCandidate(cfg, configPath, getenv, true)
	if err != nil {
		t.Fatalf("shadow candidate: %v", err)
	}

	// The admin listener and the proxy listener take free loopback ports.
	cfg.Server.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"

	logs := &SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway logs:\n%s", logs.String())
		}
	})
	gl, err := gateway.NewLogs(cfg.Log, logs, 0)
	if err != nil {
		t.Fatalf("loggers: %v", err)
	}
	reg := prometheus.NewRegistry()
	// The same assembly as faxgate serve; only timings that are not
	// configuration are shortened, so outages show in milliseconds.
	gw, err := gateway.New(cfg, gateway.Deps{
		Logs: gl, Registry: reg, Clock: o.Clock, Version: "test",
		Getenv:           getenv,
		TokenLeaseTTL:    2 * time.Second,
		RedisOpTimeout:   RedisOpTimeout,
		RateLimitTimeout: o.RateLimitTimeout,
		TLSPollEvery:     tlsPoll(o),
		FileWatchEvery:   50 * time.Millisecond,
		Candidate:        cand,
	})
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	runCtx, drain := context.WithCancel(context.Background())
	reload := make(chan struct{}, 1)
	ro := gateway.RunOptions{Ready: func(p, a string) { addrs <- [2]string{p, a} }}
	if configPath != "" {
		ro.ConfigPath, ro.Reload, ro.ReloadEvery = configPath, reload, 50*time.Millisecond
	}
	go func() {
		done <- gw.Run(runCtx, ro)
	}()
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-done:
		drain()
		t.Fatalf("gateway did not start: %v", err)
	}

	g := &Gateway{URL: "http://" + a[0], Addr: a[0], AdminURL: "http://" + a[1], Sim: sim, Upstream: up,
		Gateway: gw, Handler: gw.Handler, Tokens: gw.Tokens, Registry: reg, Metrics: gw.Metrics, Config: cfg, logs: logs,
		tls: o.TLS, drain: drain, done: done, configPath: configPath, buildYAML: build, reload: reload,
		shadowPath: shadowPath, buildShadow: func(c string) string { return buildYAML(o, up.URL, c) }}
	t.Cleanup(func() { _ = gw.Close(); _ = g.Shutdown() })
	if o.TLS != nil {
		g.URL = "https://" + a[0]
		g.Client = g.TLSClient(t, o.TLS.ClientCert, !o.TLS.HTTP1)
	} else {
		ctr := &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}
		t.Cleanup(ctr.CloseIdleConnections)
		g.Client = &http.Client{Transport: ctr, Timeout: 30 * time.Second}
	}
	if !o.NoWait {
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		if _, err := gw.Tokens.Token(wctx); err != nil {
			t.Fatalf("no first token: %v", err)
		}
	}
	return g
}

// buildYAML is the whole file of a test gateway for config: the upstream
// section, then config, with the harness's server.tls and Redis and, for a
// config file, the loopback listen addresses.
func buildYAML(o Options, upstream, config string) string {
	yaml := fmt.Sprintf("upstream:\n  base_url: %q\n  api_key_env: FG_TEST_KEY\n  timeout: %s\n%s%s",
		upstream, o.UpstreamTimeout, o.UpstreamYAML, config)
	if o.TLS != nil {
		tlsYAML := fmt.Sprintf("  tls:\n    mode: files\n    cert_file: %q\n    key_file: %q\n", o.TLS.CertFile, o.TLS.KeyFile)
		if o.TLS.ClientCAFile != "" {
			tlsYAML += fmt.Sprintf("    client_ca_file: %q\n", o.TLS.ClientCAFile)
		}
		if o.TLS.ClientAuth != "" {
			tlsYAML += fmt.Sprintf("    client_auth: %q\n", o.TLS.ClientAuth)
		}
		if o.TLS.MinVersion != "" {
			tlsYAML += fmt.Sprintf("    min_version: %q\n", o.TLS.MinVersion)
		}
		yaml = inSection(yaml, "server", tlsYAML)
	}
	if o.Redis != nil {
		yaml = o.Redis.yaml(o, yaml)
	} else if o.RedisAddr != "" {
		yaml += fmt.Sprintf("token:\n  store: redis\n  refresh_before: %s\nredis:\n  addrs: [%q]\n",
			refreshBefore(o), o.RedisAddr)
	} else if o.RateLimitRedisAddr != "" {
		yaml += fmt.Sprintf("redis:\n  addrs: [%q]\n", o.RateLimitRedisAddr)
	}
	if o.ConfigFile {
		yaml = inSection(yaml, "server", "  listen: \"127.0.0.1:0\"\n")
		yaml = inSection(yaml, "admin", "  listen: \"127.0.0.1:0\"\n")
	}
	return yaml
}

// inSection adds lines at the start of yaml's top-level section (one at
// the start of a line), or adds the section with them.
func inSection(yaml, section, lines string) string {
	if i := strings.Index("\n"+yaml, "\n"+section+":\n"); i >= 0 {
		at := i + len(section+":\n")
		return yaml[:at] + lines + yaml[at:]
	}
	if yaml != "" && !strings.HasSuffix(yaml, "\n") {
		yaml += "\n"
	}
	return yaml + section + ":\n" + lines
}

// RewriteShadow replaces the shadow candidate's file (Options.Shadow) with
// the file for config, and signals a reload, as RewriteConfig does.
func (g *Gateway) RewriteShadow(t testing.TB, config string) {
	t.Helper()
	if g.shadowPath == "" || g.configPath == "" {
		t.Fatal("gatewaytest: RewriteShadow needs Options.Shadow and Options.ConfigFile")
	}
	if err := os.WriteFile(g.shadowPath, []byte(g.buildShadow(config)), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case g.reload <- struct{}{}:
	default:
	}
}

// RewriteConfig replaces the config file (Options.ConfigFile) with the
// file for config, made as Options.Config is, and signals a reload as
// SIGHUP does. Invalid content is written as is: a failed reload is a
// thing tests look at.
func (g *Gateway) RewriteConfig(t testing.TB, config string) {
	t.Helper()
	if g.configPath == "" {
		t.Fatal("gatewaytest: RewriteConfig needs Options.ConfigFile")
	}
	if err := os.WriteFile(g.configPath, []byte(g.buildYAML(config)), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case g.reload <- struct{}{}:
	default: // a reload is already pending; it reads the new content
	}
}

func tlsPoll(o Options) time.Duration {
	if o.TLS == nil {
		return 0
	}
	return o.TLS.PollEvery
}

// refreshBefore suits the simulator's token lifetime: short test tokens are
// renewed in their second half anyway.
func refreshBefore(o Options) time.Duration {
	if o.TokenTTL > 0 && o.TokenTTL < 2*time.Hour {
		return o.TokenTTL / 5
	}
	return time.Hour
}

// SyncBuffer is an io.Writer that the gateway's goroutines and a test can
// use at once (captured logs, stderr).
type SyncBuffer = syncbuf.Buffer
