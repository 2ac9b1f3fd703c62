// Package gateway assembles faxgate from its parts: the one place where a
// configuration becomes a running gateway. faxgate serve, faxgate demo and
// the test harness (internal/testing/gatewaytest) all build it with New and run it
// with Run, so what the tests exercise is what production runs.
//
// The split follows blackbox_exporter's config/prober one: internal/config
// decides what is valid, the parts (proxy, policy, tokencache, metrics) do
// the work, and this package only wires them, with every process-level thing
// (loggers, registry, clock, environment) handed in through Deps.
package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/certstore"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/servertls"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// keyWatchEvery is how often upstream.api_key_file is checked for a rotation.
const keyWatchEvery = 5 * time.Second

// Deps are what a gateway takes from the process rather than from its
// configuration. Nothing in the gateway reaches for a global instead.
type Deps struct {
	// Logs are the loggers (NewLogs). Zero value: nothing is logged.
	Logs Logs
	// Registry receives the gateway's metrics and is what the admin
	// listener's /metrics serves: a private registry, never the default one.
	// The caller adds process collectors if it wants them. Required.
	Registry *prometheus.Registry
	// Clock drives token renewal, the key-file watcher, the config file
	// polling and the rate limiters. Default clock.Real{}.
	Clock clock.Clock
	// Getenv resolves upstream.api_key_env, redis.password_env and
	// sentinel_password_env, and the
	// ${VAR} references of a reloaded config file. Required.
	Getenv func(string) (string, bool)
	// Version is the version label of faxgate_build_info.
	Version string
	// Revision is its revision label: the git commit faxgate was built
	// from (-ldflags, Makefile); "unknown" when empty.
	Revision string
	// Candidate is the configuration's shadow candidate
	// (config.LoadCandidate), nil when it has none.
	Candidate *config.Config

	// The rest tune timings that are not configuration; zero keeps the
	// production value. Tests shorten them so an outage is seen in
	// milliseconds.

	// TokenLeaseTTL is tokencache.Options.LeaseTTL.
	TokenLeaseTTL time.Duration
	// RedisOpTimeout is tokencache.RedisOptions.OpTimeout.
	RedisOpTimeout time.Duration
	// RedisWatchEvery is redisconn.Options.WatchEvery: how often the
	// cluster's slot map or the sentinels' primary is read again.
	RedisWatchEvery time.Duration
	// RateLimitTimeout bounds one shared rate-limit decision (policy.WithRedisTimeout).
	RateLimitTimeout time.Duration
	// TLSPollEvery is how often server.tls.cert_file/key_file are checked
	// for a change (servertls.Options.PollEvery).
	TLSPollEvery time.Duration

	// FileWatchEvery is how often upstream.api_key_file and
	// upstream.proxy_auth_file are checked for a rotation (keyWatchEvery).
	FileWatchEvery time.Duration
}

// fileWatchEvery is d's FileWatchEvery, or keyWatchEvery.
func (d Deps) fileWatchEvery() time.Duration {
	if d.FileWatchEvery > 0 {
		return d.FileWatchEvery
	}
	return keyWatchEvery
}

// Gateway is an assembled gateway: built by New, served by Run.
type Gateway struct {
	// Handler is the proxy's request path; its rules are swapped by reloads.
	Handler *proxy.Handler
	// Holds are the routes held after an upstream 429 (docs/upstream-budget.md).
	Holds *limit.Holds
	// Waitlist holds the requests waiting for a hold or a limit with
	// upstream_budget.max_wait > 0 (docs/upstream-budget.md); its Waiters
	// method says who waits.
	Waitlist *limit.Waitlist
	// Admission is upstream admission: the holds, the budget, the waits
	// (docs/upstream-budget.md).
	Admission *limit.Upstream
	// Tokens holds and renews the upstream token.
	Tokens *tokencache.Manager
	// Metrics are every part's collectors, registered on Deps.Registry.
	Metrics *Metrics

	cfg       *config.Config
	deps      Deps
	log       Logs
	transport *http.Transport
	upstream  http.RoundTripper     // transport, through the egress proxy when there is one
	proxyAuth *proxyAuth            // the egress proxy's credentials, when a file holds them
	redisConn *redisconn.Conn       // nil unless cfg.UsesRedis()
	redis     redis.UniversalClient // redisConn's client, shared by every user
	keyWatch  *tokencache.KeyWatcher
	traces    *sdktrace.TracerProvider // nil with tracing off
	tls       *servertls.Server        // nil with server.tls.mode off
	compile   compileFunc
	admin     http.Handler
	draining  atomic.Bool
	started   time.Time
	reloads   reloadState // the status page's view of the config file

	mu      sync.Mutex
	servers []*http.Server // while Run serves, for Close
	closed  bool

	releaseOnce sync.Once
}

// compileFunc builds the request rules of a config; prev is the rules in
// force, whose rate-limit state carries over a reload.
type compileFunc func(cfg *config.Config, prev *policy.Rules) (*policy.Rules, error)

// New assembles the gateway described by cfg (already validated by
// config.Load or config.Parse). It resolves the secrets the config names,
// builds the upstream transport, the shared Redis connection, the token
// manager, the rules and the proxy handler, and starts nothing: no
// goroutine, no listener, no upstream call until Run. An error is a failed
// start and says which setting caused it.
func New(cfg *config.Config, d Deps) (*Gateway, error) {
	if d.Registry == nil {
		return nil, fmt.Errorf("gateway: Deps.Registry is required")
	}
	if d.Getenv == nil {
		return nil, fmt.Errorf("gateway: Deps.Getenv is required")
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	logs := d.Logs.orNop()
	log := logs.Logger
	g := &Gateway{cfg: cfg, deps: d, log: logs, Metrics: newMetrics(d.Registry, d.Version, d.Revision), started: d.Clock.Now()}

	key, err := keySource(cfg.Upstream, d.Getenv)
	if err != nil {
		return nil, err
	}
	if g.transport, err = proxy.NewTransport(proxy.TransportOptions{CAFile: cfg.Upstream.CAFile, MaxIdleConns: cfg.Upstream.MaxIdleConns}); err != nil {
		return nil, err
	}
	egress, err := g.egressOptions(cfg.Upstream, d.Getenv, log.Named("egress"))
	if err != nil {
		return nil, err
	}
	// Every upstream request and token renewal goes this way: through the
	// egress proxy when one is configured, straight to the transport when not.
	g.upstream = proxy.WithEgress(g.transport, egress)
	base, err := url.Parse(cfg.Upstream.BaseURL)
	if err != nil { // validated by config; kept so a caller skipping it fails cleanly
		return nil, fmt.Errorf("upstream.base_url: %w", err)
	}

	// Tracing (docs/tracing.md): a nil tracer, with tracing off, makes
	// every part skip its spans.
	var tracer trace.Tracer
	if cfg.Tracing.Enabled() {
		if g.traces, err = newTracing(cfg.Tracing, d.Getenv, d.Version, log.Named("tracing")); err != nil {
			return nil, err
		}
		tracer = g.traces.Tracer(tracerName)
	}

	// One Redis connection serves the token store and the rate limiter.
	var shared tokencache.Shared
	compileOpts := []policy.CompileOption{policy.WithMetrics(g.Metrics.Limits), policy.WithTracer(tracer)}
	if cfg.UsesRedis() {
		pw, err := redisPasswords(cfg.Redis, d.Getenv)
		if err != nil {
			return nil, err
		}
		g.redisConn, err = redisconn.New(cfg.Redis, pw, redisconn.Options{WatchEvery: d.RedisWatchEvery, Now: d.Clock.Now,
			Logger: log.Named("redis"), Metrics: g.Metrics.Redis, Panics: g.Metrics.countPanic})
		if err != nil {
			return nil, err
		}
		g.redis = g.redisConn.Client()
		compileOpts = append(compileOpts, policy.WithRedis(g.redis, g.Metrics.Limits, log.Named("ratelimit")))
		if d.RateLimitTimeout > 0 {
			compileOpts = append(compileOpts, policy.WithRedisTimeout(d.RateLimitTimeout))
		}
		if cfg.Token.Store == "redis" {
			g.Metrics.Tokens.StartStore()
			shared = tokencache.NewRedisStore(tokencache.RedisOptions{Client: g.redis, KeyPrefix: cfg.Redis.KeyPrefix,
				Key: key, Clock: d.Clock, OpTimeout: d.RedisOpTimeout, Logger: log.Named("token"), Panics: g.Metrics.countPanic,
				OnError: func(err error) {
					g.Metrics.Tokens.StoreErrors.WithLabelValues(tokencache.OpOf(err)).Inc()
				}})
		}
	}

	// With rate_limit.backend redis, a Retry-After hold reaches the fleet.
	var holdClient redis.UniversalClient
	if cfg.RateLimit.Backend == "redis" && g.redis != nil {
		holdClient = g.redis
	}
	g.Holds = limit.NewHolds(limit.HoldOptions{Client: holdClient, KeyPrefix: cfg.Redis.KeyPrefix, Now: d.Clock.Now,
		Logger: log.Named("budget"), Timeout: d.RedisOpTimeout, Panics: g.Metrics.countPanic})
	limit.RegisterHolds(d.Registry, g.Holds.Each)
	g.Waitlist = limit.NewWaitlist(limit.WaitlistOptions{Clock: d.Clock, Guard: limit.DefaultWaitGuard,
		Waiting: g.Metrics.Limits.BudgetWaiting, Evicted: g.Metrics.Limits.BudgetWaitEvicted})
	g.Admission = limit.NewUpstream(limit.UpstreamOptions{Holds: g.Holds, Waitlist: g.Waitlist,
		Metrics: g.Metrics.Limits, Tracer: tracer, Now: d.Clock.Now})

	var keyChanged <-chan struct{}
	if cfg.Upstream.APIKeyFile != "" {
		g.keyWatch = tokencache.NewKeyWatcher(cfg.Upstream.APIKeyFile, d.fileWatchEvery(), d.Clock, log.Named("token"))
		g.keyWatch.Panics = g.Metrics.countPanic
		keyChanged = g.keyWatch.Changed()
	}
	g.Tokens = tokencache.NewManager(tokencache.Options{
		Shared:        shared,
		KeyChanged:    keyChanged,
		LeaseTTL:      d.TokenLeaseTTL,
		Fetcher:       tokencache.NewClient(cfg.Upstream.BaseURL, g.upstream, cfg.Upstream.Timeout, key, d.Clock),
		Clock:         d.Clock,
		RefreshBefore: cfg.Token.RefreshBefore,
		RetryMin:      cfg.Token.RetryMin,
		RetryMax:      cfg.Token.RetryMax,
		Metrics:       g.Metrics.Tokens,
		Logger:        log.Named("token"),
		Panics:        g.Metrics.countPanic,
		Tracer:        tracer,
	})

	g.compile = func(c *config.Config, prev *policy.Rules) (*policy.Rules, error) {
		return policy.Compile(c.RuleSections(), d.Clock.Now, append(compileOpts, policy.WithPrevious(prev))...)
	}
	rules, err := g.compile(cfg, nil)
	if err != nil {
		g.release()
		return nil, err
	}
	// Last of the parts that can fail, so that a failure leaves nothing of
	// certmagic running. Mode off has no TLS; an unknown mode (config not
	// validated) is refused rather than served plain.
	switch cfg.Server.TLS.Mode {
	case "off":
	case "files", "acme":
		var storage certmagic.Storage // acme.storage file: servertls's FileStorage
		if cfg.Server.TLS.Mode == "acme" && cfg.Server.TLS.ACME.Storage == "redis" {
			storage = certstore.New(certstore.Options{Client: g.redis, KeyPrefix: cfg.Redis.KeyPrefix,
				Logger: log.Named("tls").Named("certstore"), OpTimeout: d.RedisOpTimeout})
		}
		g.tls, err = servertls.New(servertls.Options{TLS: cfg.Server.TLS, Clock: d.Clock, PollEvery: d.TLSPollEvery,
			Logger: log.Named("tls"), Metrics: g.Metrics.TLS, Storage: storage, Panics: g.Metrics.countPanic})
		if err != nil {
			g.release()
			return nil, err
		}
	default:
		g.release()
		return nil, fmt.Errorf("server.tls.mode: %q is not supported", cfg.Server.TLS.Mode)
	}
	g.Metrics.ConfigLastReload.SetToCurrentTime()
	g.Metrics.ConfigLastReloadOK.Set(1)
	g.reloads.loaded(cfg, d.Clock.Now(), "start", nil)
	g.Handler = proxy.New(proxy.Options{
		Upstream:          base,
		Transport:         g.upstream,
		RetryUnsent:       cfg.Upstream.RetryUnsent,
		Tokens:            g.Tokens,
		Rules:             rules,
		Admission:         g.Admission,
		ShadowAdmission:   limit.NewUpstream(limit.UpstreamOptions{Holds: g.Holds, Now: d.Clock.Now}),
		ResendBufferBytes: cfg.Server.ResendBufferBytes,
		MaxBodyBytes:      cfg.Server.MaxBodyBytes,
		ReadTimeout:       cfg.Server.ReadTimeout,
		UpstreamTimeout:   cfg.Upstream.Timeout,
		Metrics:           g.Metrics.Proxy,
		Logger:            log,
		AccessLog:         logs.Access,
		AuditLogger:       logs.Audit.Named("audit"),
		Tracer:            tracer,
	})
	g.Metrics.rulesApplied(rules)
	if d.Candidate != nil {
		shadow, err := g.compileShadow(d.Candidate, nil)
		if err != nil {
			g.release()
			return nil, fmt.Errorf("shadow.config_file: %w", err)
		}
		g.Handler.SetShadow(shadow)
	}
	g.admin = hostGuard(adminHandler(d.Registry, cfg.Admin.Pprof, g.ready, g.budgetStatus, g.statusPage, g.statusJSON),
		cfg.Admin.AllowedHosts)
	registerReady(d.Registry, func() bool { ok, _ := g.ready(); return ok })
	return g, nil
}

// Config is the configuration the gateway was built with. A reload changes
// the rules, not this value.
func (g *Gateway) Config() *config.Config { return g.cfg }

// Admin is the admin listener's handler: /metrics, /healthz, /readyz,
// /budget, the status page (docs/status-page.md) and, when enabled,
// /debug/pprof/ (docs/metrics-and-alerts.md).
func (g *Gateway) Admin() http.Handler { return g.admin }

// ready is /readyz: not ready while draining or, with TLS, without a valid
// certificate; else as ready as the token.
func (g *Gateway) ready() (bool, string) {
	if g.draining.Load() {
		return false, "shutting down"
	}
	if g.tls != nil {
		if ok, why := g.tls.Ready(); !ok {
			return false, why
		}
	}
	return g.Tokens.Ready()
}

// Close stops a gateway at once: open connections are cut, a running Run
// returns (without waiting out the drain budget), and the Redis connection
// and idle upstream connections are closed. Use it for a gateway that was
// built but not run, and in tests; faxgate serve stops by ending Run's
// context, which drains.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	servers := g.servers
	g.mu.Unlock()
	for _, s := range servers {
		_ = s.Close()
	}
	g.release()
	return nil
}

// CloseIdleConnections closes the idle upstream connections: the next
// request dials again (through the egress proxy, when there is one).
func (g *Gateway) CloseIdleConnections() { g.transport.CloseIdleConnections() }

// release frees what New acquired; Run and Close both call it.
func (g *Gateway) release() {
	g.releaseOnce.Do(func() {
		// The candidate's decisions still running write their access
		// lines first; they need Redis, which closes next.
		if g.Handler != nil {
			ctx, cancel := context.WithTimeout(context.Background(), shadowShutdownWait)
			g.Handler.WaitShadow(ctx)
			cancel()
		}
		if g.redisConn != nil {
			_ = g.redisConn.Close()
		}
		if g.tls != nil {
			g.tls.Close()
		}
		g.transport.CloseIdleConnections()
		if g.traces != nil {
			// The spans still queued go out if the collector answers
			// soon; a down collector does not hold the exit.
			ctx, cancel := context.WithTimeout(context.Background(), traceShutdownWait)
			_ = g.traces.Shutdown(ctx)
			cancel()
		}
	})
}

// keySource resolves upstream.api_key_file / api_key_env. The file is
// re-read at every renewal; the variable is read once, here.
func keySource(u config.Upstream, getenv func(string) (string, bool)) (tokencache.KeyFunc, error) {
	if u.APIKeyFile != "" {
		k := tokencache.FileKey(u.APIKeyFile)
		if _, err := k(); err != nil {
			return nil, fmt.Errorf("upstream.api_key_file: %w", err)
		}
		return k, nil
	}
	v, ok := getenv(u.APIKeyEnv)
	if !ok || v == "" {
		return nil, fmt.Errorf("upstream.api_key_env: environment variable %q is not set", u.APIKeyEnv)
	}
	return tokencache.StaticKey(tokencache.NewSecret(v)), nil
}

// redisPasswords resolves redis.password_env and sentinel_password_env
// (each "" when none is named).
func redisPasswords(c config.Redis, getenv func(string) (string, bool)) (redisconn.Passwords, error) {
	var pw redisconn.Passwords
	for _, v := range []struct {
		path, name string
		to         *redisconn.Secret
	}{{"redis.password_env", c.PasswordEnv, &pw.Data}, {"redis.sentinel_password_env", c.SentinelPasswordEnv, &pw.Sentinel}} {
		if v.name == "" {
			continue
		}
		val, ok := getenv(v.name)
		if !ok {
			return pw, fmt.Errorf("%s: environment variable %q is not set", v.path, v.name)
		}
		*v.to = redisconn.NewSecret(val)
	}
	return pw, nil
}
