package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/faxgate/faxgate/internal/config"
	// Aliased: the tests of this package name their running-gateway fixture "gateway".
	gw "github.com/faxgate/faxgate/internal/app/gateway"
	"github.com/faxgate/faxgate/internal/base/redisconn"
)

// serve runs the gateway described by cfg until ctx is done, then drains.
// path is the config file to reload on SIGHUP and on change ("" for none).
// It is wiring only: the process-level parts (loggers on stderr, a private
// registry with the process collectors, the wall clock, the environment)
// are made here and handed to the gateway package.
func serve(ctx context.Context, cfg *config.Config, path string, e env) error {
	logs, err := gw.NewLogs(cfg.Log, e.stderr, e.logFlushEvery)
	if err != nil {
		return err
	}
	defer logs.Close()
	if cfg.Token.Store == "redis" || cfg.RateLimit.Backend == "redis" {
		// go-redis logs through one process-wide logger; main owns the
		// process, so it is installed here and nowhere else.
		redisconn.InstallProcessLogger(logs.Logger.Named("redis"))
	}

	cand, err := config.LoadCandidate(cfg, path, e.getenv, true)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// A nil e.clock (always, outside tests) is the wall clock.
	g, err := gw.New(cfg, gw.Deps{Logs: logs, Registry: reg, Clock: e.clock, Getenv: e.getenv, Version: version,
		Revision: commit, Candidate: cand})
	if err != nil {
		return err
	}
	return g.Run(ctx, gw.RunOptions{ConfigPath: path, Reload: e.hup, ReloadEvery: e.reloadEvery, Ready: e.ready})
}
