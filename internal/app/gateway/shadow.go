package gateway

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/redisconn"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/limit"
)

// shadowKeys is where a shadow candidate's shared limits live, after
// redis.key_prefix: never in the live ones' keys.
const shadowKeys = "shadow:"

// compileShadow builds the rules of a shadow candidate
// (docs/callers-and-policy.md#trying-a-change-in-shadow-mode) with state of
// their own: buckets and windows under key_prefix + "shadow:" with
// rate_limit.backend redis, their own local ones otherwise, carried over
// from prev (the candidate in force) on a reload. Its limits report to
// collectors nobody scrapes: the live series stay the live rules'.
func (g *Gateway) compileShadow(cand *config.Config, prev *policy.Rules) (*policy.Rules, error) {
	s := cand.RuleSections()
	s.KeyPrefix = g.cfg.Redis.KeyPrefix + shadowKeys
	met := limit.NewMetrics(prometheus.NewRegistry())
	opts := []policy.CompileOption{policy.WithMetrics(met), policy.WithPrevious(prev)}
	if g.redis != nil {
		opts = append(opts, policy.WithRedis(g.redis, met, g.log.Logger.Named("shadow")))
		if g.deps.RateLimitTimeout > 0 {
			opts = append(opts, policy.WithRedisTimeout(g.deps.RateLimitTimeout))
		}
	}
	return policy.Compile(s, g.deps.Clock.Now, opts...)
}

// shadowShutdownWait bounds the wait at exit for the candidate's decisions
// still running (Handler.WaitShadow): each asks Redis for at most the
// rate-limit timeout.
const shadowShutdownWait = 5 * time.Second

// shadowDropWait bounds the deletion of a removed candidate's keys.
const shadowDropWait = 10 * time.Second

// dropShadowState deletes the keys of a shadow candidate a reload took
// away (key_prefix + "shadow:"), on the reload's goroutine, never a
// request's. Best effort: they expire with their windows anyway. Local
// state goes with the candidate's rules.
func (g *Gateway) dropShadowState() {
	if g.redis == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shadowDropWait)
	defer cancel()
	var dropped atomic.Int64
	err := redisconn.ScanPrefix(ctx, g.redis, g.cfg.Redis.KeyPrefix+shadowKeys, func(key string) bool {
		if g.redis.Del(ctx, key).Err() == nil {
			dropped.Add(1)
		}
		return ctx.Err() == nil
	})
	log := g.log.Logger.Named("shadow")
	if err != nil {
		log.Warn("the removed shadow candidate's keys were not all deleted; they expire with their windows",
			zap.Int64("deleted", dropped.Load()), zap.Error(redisconn.ScrubError(err)))
		return
	}
	log.Info("the removed shadow candidate's keys are deleted", zap.Int64("deleted", dropped.Load()))
}
