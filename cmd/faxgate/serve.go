package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/metrics"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// serve runs the gateway described by cfg until ctx is done, then drains.
// path is the config file to reload on SIGHUP and on change ("" for none).
func serve(ctx context.Context, cfg *config.Config, path string, e env) error {
	log, level, err := newLogger(cfg.Log, e.stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	met := metrics.New(reg, version)

	key, err := keySource(cfg.Upstream, e.getenv)
	if err != nil {
		return err
	}
	transport, err := upstreamTransport(cfg.Upstream)
	if err != nil {
		return err
	}
	base, _ := url.Parse(cfg.Upstream.BaseURL) // validated by config
	clock := tokencache.RealClock{}
	// One Redis client serves the token store and the rate limiter.
	var shared tokencache.Shared
	var compileOpts []policy.CompileOption
	if cfg.Token.Store == "redis" || cfg.RateLimit.Backend == "redis" {
		password := ""
		if cfg.Redis.PasswordEnv != "" {
			v, ok := e.getenv(cfg.Redis.PasswordEnv)
			if !ok {
				return fmt.Errorf("redis.password_env: environment variable %q is not set", cfg.Redis.PasswordEnv)
			}
			password = v
		}
		// go-redis logs through a process-wide logger; route it to ours so
		// stderr stays JSON lines.
		redis.SetLogger(tokencache.RedisLogger{L: log.Named("redis")})
		rc := tokencache.NewRedisClient(cfg.Redis, password)
		defer rc.Close()
		compileOpts = append(compileOpts, policy.WithRedis(rc, met, log.Named("ratelimit")))
		if cfg.Token.Store == "redis" {
			shared = tokencache.NewRedisStore(tokencache.RedisOptions{Client: rc, KeyPrefix: cfg.Redis.KeyPrefix,
				Key: key, Clock: clock, OnError: func(err error) {
					met.TokenStoreErrors.WithLabelValues(tokencache.OpOf(err)).Inc()
				}})
		}
	}
	runCtx, stopTokens := context.WithCancel(context.Background())
	defer stopTokens()
	var keyChanged <-chan struct{}
	if cfg.Upstream.APIKeyFile != "" {
		keyChanged = tokencache.WatchKeyFile(runCtx, cfg.Upstream.APIKeyFile, 5*time.Second, clock)
	}
	tokens := tokencache.NewManager(tokencache.Options{
		Shared:        shared,
		KeyChanged:    keyChanged,
		Fetcher:       tokencache.NewClient(cfg.Upstream.BaseURL, transport, cfg.Upstream.Timeout, key, clock),
		Clock:         clock,
		RefreshBefore: cfg.Token.RefreshBefore,
		RetryMin:      cfg.Token.RetryMin,
		RetryMax:      cfg.Token.RetryMax,
		Metrics:       met,
		Logger:        log.Named("token"),
	})
	compile := func(c *config.Config, prev *policy.Rules) (*policy.Rules, error) {
		return policy.Compile(c, time.Now, append(compileOpts, policy.WithPrevious(prev))...)
	}
	rules, err := compile(cfg, nil)
	if err != nil {
		return err
	}
	met.ConfigLastReload.SetToCurrentTime()
	handler := proxy.New(proxy.Options{
		Upstream:        base,
		Transport:       transport,
		Tokens:          tokens,
		Rules:           rules,
		MaxBodyBytes:    cfg.Server.MaxBodyBytes,
		ReadTimeout:     cfg.Server.ReadTimeout,
		UpstreamTimeout: cfg.Upstream.Timeout,
		Metrics:         met,
		Logger:          log,
	})

	var draining atomic.Bool
	admin := adminHandler(reg, cfg.Admin.Pprof, func() (bool, string) {
		if draining.Load() {
			return false, "shutting down"
		}
		return tokens.Ready()
	})

	pln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	aln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		pln.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	psrv := proxy.NewServer(handler, proxy.ServerOptions{
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		Logger:            log,
	})
	asrv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: zap.NewStdLog(log.Named("admin"))}

	tokensDone := make(chan struct{})
	go func() { defer close(tokensDone); tokens.Run(runCtx) }()
	if path != "" {
		rl := &reloader{path: path, getenv: e.getenv, running: cfg, compile: compile, handler: handler,
			level: level, met: met, log: log.Named("config")}
		every := e.reloadEvery
		if every <= 0 {
			every = 2 * time.Second
		}
		go rl.run(runCtx, e.hup, every)
	}

	errc := make(chan error, 2)
	go func() { errc <- psrv.Serve(proxy.WrapListener(pln)) }()
	go func() { errc <- asrv.Serve(aln) }()
	log.Info("faxgate serving", zap.String("proxy", pln.Addr().String()), zap.String("admin", aln.Addr().String()),
		zap.String("version", version))
	if e.ready != nil {
		e.ready(pln.Addr().String(), aln.Addr().String())
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	// Drain (contract section 9): not ready at once, stop accepting, let
	// in-flight requests finish within shutdown_timeout.
	draining.Store(true)
	log.Info("shutting down", zap.Duration("drain_budget", cfg.Server.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	drainErr := psrv.Shutdown(sctx)
	if drainErr != nil {
		_ = psrv.Close()
	}
	_ = asrv.Shutdown(sctx)
	stopTokens()
	<-tokensDone
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	if drainErr != nil {
		return fmt.Errorf("drain budget of %v ran out with requests in flight", cfg.Server.ShutdownTimeout)
	}
	log.Info("stopped")
	return nil
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

// upstreamTransport is tuned for one upstream host: every idle connection may
// go to it, compression is left to the caller (bodies are relayed
// unchanged), and no proxy is taken from the environment.
func upstreamTransport(u config.Upstream) (*http.Transport, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if u.CAFile != "" {
		pem, err := os.ReadFile(u.CAFile)
		if err != nil {
			return nil, fmt.Errorf("upstream.ca_file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream.ca_file: no PEM certificate in %s", u.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          u.MaxIdleConns,
		MaxIdleConnsPerHost:   u.MaxIdleConns,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}, nil
}

// newLogger builds the zap logger of the log section, writing to w (stderr);
// the level can be changed while running (config reload).
func newLogger(c config.Log, w interface{ Write([]byte) (int, error) }) (*zap.Logger, zap.AtomicLevel, error) {
	lvl, err := zap.ParseAtomicLevel(c.Level)
	if err != nil {
		return nil, lvl, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	var enc zapcore.Encoder
	if c.Format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), lvl, nil
}
