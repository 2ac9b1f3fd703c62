package limit

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/faxgate/faxgate/internal/config"
)

// RateResult is one rate-limit decision, with what the RateLimit-* response
// headers report.
type RateResult struct {
	Allowed bool
	// Limit is the caller's quota: the bucket's burst.
	Limit int
	// Remaining is how many more requests would be admitted right now.
	Remaining int
	// Reset is how long until the bucket is full again.
	Reset time.Duration
	// RetryAfter is how long until one request would be admitted (when !Allowed).
	RetryAfter time.Duration
}

// RateLimiter decides whether a caller may make one more request now. ctx is
// the request's: a limiter that asks a shared store bounds the wait by it.
type RateLimiter interface {
	Allow(ctx context.Context, caller string) RateResult
}

// Deps is what the limits need beyond the configuration: the Redis
// connection that shares them (nil when none was opened: only a process
// started with Redis configured has one), the metrics they report to, their
// logger and the bound on one shared decision (0: DefaultRedisRateTimeout).
type Deps struct {
	Redis   redis.UniversalClient
	Metrics *Metrics
	Logger  *zap.Logger
	Timeout time.Duration
	// Tracer records the decisions asked of Redis as spans
	// (docs/tracing.md); nil when tracing is off.
	Tracer trace.Tracer
}

// RateConfig is what a rate limiter is built from: the rate_limit section,
// the callers with their own rate_limit, and redis.key_prefix, under which
// shared buckets live.
type RateConfig struct {
	RateLimit config.RateLimit
	Callers   []config.Caller
	KeyPrefix string
}

// NewRateLimiter builds the limiter of c. prev, the limiter in force before
// a reload (nil at start), hands its buckets over, so a reload neither
// refills nor empties anyone's burst.
func NewRateLimiter(c RateConfig, now func() time.Time, d Deps, prev RateLimiter) (RateLimiter, error) {
	if c.RateLimit.Backend != "redis" {
		l := NewLocalRateLimiter(c.Callers, c.RateLimit.Default, now)
		if prev, ok := prev.(*LocalRateLimiter); ok {
			l.inherit(prev)
		}
		return l, nil
	}
	if d.Redis == nil {
		// Only a reload that switches the backend gets here: faxgate serve
		// connects to Redis at start when either user of it is configured.
		return nil, errors.New(`rate_limit.backend: "redis" takes a restart: no Redis connection was opened at start`)
	}
	return NewRedisRateLimiter(RedisRateOptions{
		Client:       d.Redis,
		KeyPrefix:    c.KeyPrefix,
		Callers:      c.Callers,
		Default:      c.RateLimit.Default,
		ReplicasHint: c.RateLimit.ReplicasHint,
		Now:          now,
		Timeout:      d.Timeout,
		Metrics:      d.Metrics,
		Logger:       d.Logger,
		Tracer:       d.Tracer,
	}), nil
}

// LocalRateLimiter keeps one token bucket per caller in this process
// (rate_limit.backend: local). Buckets are keyed by the caller's configured
// name, so no spelling of a header, source port or path opens a new one.
type LocalRateLimiter struct {
	now     func() time.Time
	buckets map[string]*rate.Limiter
	def     config.Limit
	mu      sync.Mutex // guards extra
	extra   map[string]*rate.Limiter
}

var _ RateLimiter = (*LocalRateLimiter)(nil)

// NewLocalRateLimiter builds a bucket for every caller: its own rate_limit, or def.
func NewLocalRateLimiter(callers []config.Caller, def config.Limit, now func() time.Time) *LocalRateLimiter {
	l := &LocalRateLimiter{now: now, buckets: make(map[string]*rate.Limiter, len(callers)), def: def,
		extra: map[string]*rate.Limiter{}}
	for _, c := range callers {
		lim := def
		if c.RateLimit != nil {
			lim = *c.RateLimit
		}
		l.buckets[c.Name] = rate.NewLimiter(rate.Limit(lim.RPS), lim.Burst)
	}
	return l
}

// inherit takes over prev's bucket for every caller that keeps its name, so
// a reload neither refills nor empties anyone's burst; a changed limit
// applies from now on.
func (l *LocalRateLimiter) inherit(prev *LocalRateLimiter) {
	now := l.now()
	for name, b := range l.buckets {
		old := prev.buckets[name]
		if old == nil {
			continue
		}
		old.SetLimitAt(now, b.Limit())
		old.SetBurstAt(now, b.Burst())
		l.buckets[name] = old
	}
}

// Allow implements RateLimiter; it never blocks, so ctx is unused.
func (l *LocalRateLimiter) Allow(_ context.Context, caller string) RateResult {
	b := l.buckets[caller]
	if b == nil {
		b = l.fallback(caller)
	}
	now := l.now()
	ok := b.AllowN(now, 1)
	return result(ok, b.Burst(), float64(b.Limit()), b.TokensAt(now))
}

// fallback gives a name outside the configured callers the default limit; the
// identifier only returns configured names, so this is a safety net.
func (l *LocalRateLimiter) fallback(caller string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.extra[caller]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(l.def.RPS), l.def.Burst)
		l.extra[caller] = b
	}
	return b
}

func result(ok bool, burst int, rps, tokens float64) RateResult {
	r := RateResult{Allowed: ok, Limit: burst, Remaining: max(0, int(math.Floor(tokens)))}
	if rps > 0 {
		r.Reset = secondsDuration((float64(burst) - tokens) / rps)
		if !ok {
			r.RetryAfter = secondsDuration((1 - tokens) / rps)
		}
	}
	return r
}

func secondsDuration(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
