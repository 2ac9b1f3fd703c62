package gateway

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/filedigest"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/proxy"
)

// reloadable are the sections a running gateway applies without a restart
// (issue: callers, policy, rate_limit, routes; plus the log level). Every
// other setting is reported as needing a restart, never half-applied.
var reloadable = map[string]bool{"callers": true, "policy": true, "rate_limit": true, "routes": true,
	"upstream_budget": true, "log.level": true, "shadow": true}

// reloader re-reads the config file on SIGHUP or when its content changes,
// and swaps the request rules atomically: each request is decided wholly by
// the rules it started with.
type reloader struct {
	path    string
	getenv  func(string) (string, bool)
	running *config.Config // what is applied now
	compile compileFunc
	// compileShadow builds a shadow candidate's rules, dropShadow deletes
	// the shared state of one taken away (shadow.go).
	compileShadow compileFunc
	dropShadow    func()
	// candidate is the shadow candidate's file, polled like path; "" when
	// there is none.
	candidate  string
	candDigest filedigest.Digest
	handler    *proxy.Handler
	level      zap.AtomicLevel
	met        *Metrics
	log        *zap.Logger
	clock      clock.Clock
	digest     filedigest.Digest
	state      *reloadState
}

// newReloader starts from the file's content as it is now, so a change made
// before the loop first polls is still seen.
func newReloader(g *Gateway, path string) *reloader {
	rl := &reloader{path: path, getenv: g.deps.Getenv, running: g.cfg, compile: g.compile, handler: g.Handler,
		compileShadow: g.compileShadow, dropShadow: g.dropShadowState, level: g.log.Level, met: g.Metrics, log: g.log.Logger.Named("config"),
		clock: g.deps.Clock, state: &g.reloads}
	rl.state.setFile(path)
	rl.digest, _ = filedigest.Of(path)
	if rl.candidate = candidatePath(g.cfg, path); rl.candidate != "" {
		rl.candDigest, _ = filedigest.Of(rl.candidate)
	}
	return rl
}

// candidatePath is the file of cfg's shadow candidate as the reloader polls
// it (relative to the live file's directory), "" when there is none.
func candidatePath(cfg *config.Config, livePath string) string {
	if cfg == nil || cfg.Shadow.ConfigFile == "" {
		return ""
	}
	if filepath.IsAbs(cfg.Shadow.ConfigFile) {
		return cfg.Shadow.ConfigFile
	}
	return filepath.Join(filepath.Dir(livePath), cfg.Shadow.ConfigFile)
}

// run reloads on every signal from hup and whenever the file's content
// changes (polled every interval), until ctx ends. A panic outside a reload
// (a broken clock, say) restarts the loop one interval later: without it,
// SIGHUP would silently stop working.
func (rl *reloader) run(ctx context.Context, hup <-chan struct{}, interval time.Duration) {
	background.Loop(ctx, rl.log, rl.met.countPanic, "config_reload", func(ctx context.Context) bool {
		return clock.Sleep(ctx, rl.clock, interval)
	}, func(ctx context.Context) { rl.poll(ctx, hup, interval) })
}

func (rl *reloader) poll(ctx context.Context, hup <-chan struct{}, interval time.Duration) {
	for {
		t := rl.clock.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-hup:
			t.Stop()
			rl.reload("signal")
		case <-t.C():
			d, err := filedigest.Of(rl.path)
			if err == nil && d != rl.digest {
				rl.reload("file change")
				continue
			}
			if rl.candidate != "" {
				if d, err := filedigest.Of(rl.candidate); err == nil && d != rl.candDigest {
					rl.reload("shadow candidate change")
				}
			}
		}
	}
}

// reload applies the file if it is valid; an invalid file changes nothing.
// A panic while loading or compiling (a bug, since both are meant to return
// errors) is logged with its stack and treated like an invalid file: the
// running configuration stays, and the next signal or change tries again.
func (rl *reloader) reload(trigger string) {
	panicked := false
	func() {
		defer background.Guard(rl.log, rl.met.countPanic, "config_reload", "the running configuration stays in force", &panicked)
		rl.tryReload(trigger)
	}()
	if panicked {
		rl.met.ConfigReload.WithLabelValues("error").Inc()
		rl.met.ConfigLastReloadOK.Set(0)
		rl.state.failed(rl.clock.Now(), trigger, []string{"the reload panicked (a bug; the log has its stack)"})
	}
}

// tryReload reads the file and its shadow candidate, and applies both or
// neither: a candidate that does not load refuses the reload like the live
// file would, and the candidate in force stays.
func (rl *reloader) tryReload(trigger string) {
	rl.digest, _ = filedigest.Of(rl.path)
	cfg, err := config.Load(rl.path, rl.getenv)
	var cand *config.Config
	if err == nil {
		cand, err = config.LoadCandidate(cfg, rl.path, rl.getenv, false)
	}
	rl.candidate, rl.candDigest = candidatePath(cfg, rl.path), filedigest.Digest{}
	if rl.candidate != "" {
		rl.candDigest, _ = filedigest.Of(rl.candidate)
	}
	if err == nil {
		var rules, shadow *policy.Rules
		rules, err = rl.compile(cfg, rl.handler.Rules())
		if err == nil && cand != nil {
			shadow, err = rl.compileShadow(cand, rl.handler.ShadowRules())
		}
		if err == nil {
			rl.apply(cfg, rules, shadow, trigger)
			return
		}
	}
	rl.met.ConfigReload.WithLabelValues("error").Inc()
	rl.met.ConfigLastReloadOK.Set(0)
	var ps config.Problems
	problems := []string{err.Error()}
	if errors.As(err, &ps) {
		problems = problems[:0]
		for _, p := range ps {
			problems = append(problems, p.String())
		}
	}
	rl.state.failed(rl.clock.Now(), trigger, problems)
	rl.log.Error("config reload rejected; the running configuration stays in force",
		zap.String("trigger", trigger), zap.Strings("problems", problems))
}

func (rl *reloader) apply(cfg *config.Config, rules, shadow *policy.Rules, trigger string) {
	rl.handler.SetRules(rules)
	removed := shadow == nil && rl.handler.ShadowRules() != nil
	rl.handler.SetShadow(shadow) // nil without a candidate: its evaluation stops, its state goes
	if removed && rl.dropShadow != nil {
		defer rl.dropShadow() // once the reload is reported
	}
	rl.met.rulesApplied(rules)
	if lvl, err := zap.ParseAtomicLevel(cfg.Log.Level); err == nil {
		rl.level.SetLevel(lvl.Level())
	}
	restart := restartNeeded(rl.running, cfg)
	next := *rl.running
	next.Callers, next.Policy, next.RateLimit, next.Routes = cfg.Callers, cfg.Policy, cfg.RateLimit, cfg.Routes
	next.UpstreamBudget, next.Shadow = cfg.UpstreamBudget, cfg.Shadow
	next.Log.Level = cfg.Log.Level
	rl.running = &next
	rl.state.loaded(rl.running, rl.clock.Now(), trigger, restart)
	rl.met.ConfigReload.WithLabelValues("ok").Inc()
	rl.met.ConfigLastReload.SetToCurrentTime()
	rl.met.ConfigLastReloadOK.Set(1)
	if len(restart) > 0 {
		rl.met.ConfigRestartRequired.Set(1)
		rl.log.Warn("config reloaded; these changed settings need a restart and are not applied",
			zap.String("trigger", trigger), zap.Strings("restart_required", restart))
		return
	}
	rl.met.ConfigRestartRequired.Set(0)
	rl.log.Info("config reloaded", zap.String("trigger", trigger))
}

// restartNeeded lists the YAML paths (section.key) whose values differ
// between the running and the new configuration and are not reloadable.
func restartNeeded(old, cur *config.Config) []string {
	var out []string
	ov, nv := reflect.ValueOf(*old), reflect.ValueOf(*cur)
	for i := range ov.NumField() {
		sec := yamlName(ov.Type().Field(i))
		if reloadable[sec] {
			continue
		}
		of, nf := ov.Field(i), nv.Field(i)
		if of.Kind() != reflect.Struct {
			if !reflect.DeepEqual(of.Interface(), nf.Interface()) {
				out = append(out, sec)
			}
			continue
		}
		for j := range of.NumField() {
			path := sec + "." + yamlName(of.Type().Field(j))
			if !reloadable[path] && !reflect.DeepEqual(of.Field(j).Interface(), nf.Field(j).Interface()) {
				out = append(out, path)
			}
		}
	}
	return out
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}
