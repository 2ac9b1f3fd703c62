package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/proxy/listener"
)

// defaultReloadEvery is how often the config file is checked for changes.
const defaultReloadEvery = 2 * time.Second

// acmeHTTPTimeout bounds reading and answering one request on
// acme.http_listen.
const acmeHTTPTimeout = 10 * time.Second

// RunOptions are what Run takes from its caller beyond the configuration.
type RunOptions struct {
	// ConfigPath is the file to reload on Reload and on change; "" for none
	// (faxgate demo, tests that build the config in memory).
	ConfigPath string
	// Reload delivers SIGHUP: reload the config file now.
	Reload <-chan struct{}
	// ReloadEvery is how often the file's content is checked for changes.
	// Default 2s.
	ReloadEvery time.Duration
	// Ready, when set, receives the bound addresses once the gateway serves.
	Ready func(proxyAddr, adminAddr string)
}

// Run binds server.listen and admin.listen, starts the background loops
// (token renewal, key-file watcher, config reloader) and serves until ctx
// ends, then drains (docs/deployment.md, Shutdown): /readyz turns 503 at once, no new
// connection is accepted, and requests in flight get server.shutdown_timeout
// to finish. It returns nil after a clean drain, and an error when a
// listener fails or the drain budget ran out. Run is called once.
func (g *Gateway) Run(ctx context.Context, o RunOptions) error {
	defer g.release()
	cfg, log := g.cfg, g.log.Logger
	if cfg.Admin.Pprof {
		defer enableContentionProfiles()()
	}

	pln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	aln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		pln.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	// http-01 (mode acme with acme.http_listen): bound before certmagic
	// starts, so its solver finds the port taken and leaves the answer to
	// this listener.
	var hln net.Listener
	var hsrv *http.Server
	if a := cfg.Server.TLS.ACME; g.tls != nil && cfg.Server.TLS.Mode == "acme" && a.HTTPListen != "" {
		if hln, err = net.Listen("tcp", a.HTTPListen); err != nil {
			pln.Close()
			aln.Close()
			return fmt.Errorf("server.tls.acme.http_listen: %w", err)
		}
		// The challenge listener faces the CA (often the internet) and only
		// ever answers small GETs: whole-exchange bounds keep a slow client
		// from holding its sockets.
		hsrv = &http.Server{Handler: g.tls.HTTPChallengeHandler(), ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
			ReadTimeout: acmeHTTPTimeout, WriteTimeout: acmeHTTPTimeout,
			IdleTimeout: cfg.Server.IdleTimeout, ErrorLog: zap.NewStdLog(log.Named("acme_http"))}
	}
	if g.tls != nil {
		var haddr net.Addr
		if hln != nil {
			haddr = hln.Addr()
		}
		g.tls.Bound(pln.Addr(), haddr)
	}
	psrv := listener.NewServer(g.Handler, listener.ServerOptions{
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		Logger:            log,
		TLS:               g.tls != nil,
	})
	// The listener's framing sniffer sits under the TLS plaintext and
	// serves HTTP/1.x only (see listener.WrapTLS).
	var served net.Listener
	if g.tls != nil {
		tlsLog := log.Named("tls")
		served = listener.WrapTLS(pln, g.tls.TLSConfig(), listener.TLSOptions{
			HandshakeTimeout: cfg.Server.ReadHeaderTimeout,
			OnHandshakeError: func(reason string, err error) {
				g.Metrics.TLS.HandshakeErrors.WithLabelValues(reason).Inc()
				if ce := tlsLog.Check(zap.DebugLevel, "TLS handshake failed"); ce != nil {
					ce.Write(zap.String("reason", reason), zap.String("error", err.Error()))
				}
			},
		})
	} else {
		served = listener.Wrap(pln)
	}
	// The admin listener cuts slow and idle connections as the proxy
	// listener does: a header trickled byte by byte holds a goroutine no
	// longer than read_header_timeout. Nothing it serves reads a body.
	asrv := &http.Server{Handler: g.admin, ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout: cfg.Server.ReadHeaderTimeout, IdleTimeout: cfg.Server.IdleTimeout,
		MaxHeaderBytes: listener.MaxHeaderBytes, ErrorLog: zap.NewStdLog(log.Named("admin"))}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		pln.Close()
		aln.Close()
		if hln != nil {
			hln.Close()
		}
		return nil
	}
	g.servers = []*http.Server{psrv, asrv}
	if hsrv != nil {
		g.servers = append(g.servers, hsrv)
	}
	g.mu.Unlock()

	// The loops outlive ctx by the drain: tokens must keep flowing to the
	// requests still in flight.
	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var loops sync.WaitGroup
	defer func() { stopLoops(); loops.Wait() }()
	goLoop := func(f func(context.Context)) {
		loops.Add(1)
		go func() { defer loops.Done(); f(loopCtx) }()
	}
	goLoop(g.Tokens.Run)
	goLoop(g.Holds.Run)
	if g.redisConn != nil {
		goLoop(g.redisConn.Run)
	}
	if g.keyWatch != nil {
		goLoop(g.keyWatch.Run)
	}
	if g.proxyAuth != nil {
		goLoop(func(ctx context.Context) { g.proxyAuth.run(ctx, g.Metrics.countPanic) })
	}
	if g.tls != nil {
		goLoop(g.tls.Run)
	}
	if o.ConfigPath != "" {
		every := o.ReloadEvery
		if every <= 0 {
			every = defaultReloadEvery
		}
		rl := newReloader(g, o.ConfigPath)
		goLoop(func(ctx context.Context) { rl.run(ctx, o.Reload, every) })
	}

	errc := make(chan error, 3)
	go func() { errc <- psrv.Serve(served) }()
	go func() { errc <- asrv.Serve(aln) }()
	if hsrv != nil {
		go func() { errc <- hsrv.Serve(hln) }()
	}
	log.Info("faxgate serving", zap.String("proxy", pln.Addr().String()), zap.String("admin", aln.Addr().String()),
		zap.String("tls", cfg.Server.TLS.Mode), zap.String("version", g.deps.Version))
	if o.Ready != nil {
		o.Ready(pln.Addr().String(), aln.Addr().String())
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	// Drain: not ready at once, stop accepting, let in-flight requests
	// finish within shutdown_timeout.
	g.draining.Store(true)
	log.Info("shutting down", zap.Duration("drain_budget", cfg.Server.ShutdownTimeout))
	// Requests waiting for a hold or a limit are answered within the first
	// half of the drain, so that the admitted ones have the second half for
	// their exchange (docs/upstream-budget.md#waiting-instead-of-refusing).
	g.Waitlist.Drain(g.deps.Clock.Now().Add(cfg.Server.ShutdownTimeout / 2))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	drainErr := psrv.Shutdown(sctx)
	if drainErr != nil {
		_ = psrv.Close()
	}
	_ = asrv.Shutdown(sctx)
	if hsrv != nil {
		_ = hsrv.Shutdown(sctx)
	}
	stopLoops()
	loops.Wait()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	if drainErr != nil {
		return fmt.Errorf("drain budget of %v ran out with requests in flight", cfg.Server.ShutdownTimeout)
	}
	log.Info("stopped")
	return nil
}
