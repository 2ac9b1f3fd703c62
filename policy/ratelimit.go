package policy

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/metrics"
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

// CompileOption gives Compile what the configuration alone cannot: live
// connections and the parts they report to.
type CompileOption func(*compileOptions)

type compileOptions struct {
	prev    *Rules
	redis   redis.UniversalClient
	metrics *metrics.Metrics
	log     *zap.Logger
	timeout time.Duration
}

// WithRedis is the Redis client through which rate_limit.backend: redis
// shares limits, with the metrics and logger of that limiter. Compile ignores
// it with backend local.
func WithRedis(client redis.UniversalClient, m *metrics.Metrics, log *zap.Logger) CompileOption {
	return func(o *compileOptions) { o.redis, o.metrics, o.log = client, m, log }
}

// WithMetrics gives the compiled rules the metrics they report to (the
// upstream budget's, whatever the backend).
func WithMetrics(m *metrics.Metrics) CompileOption {
	return func(o *compileOptions) { o.metrics = m }
}

// WithRedisTimeout bounds each shared rate-limit decision (default
// DefaultRedisRateTimeout); after it the request is decided locally.
func WithRedisTimeout(d time.Duration) CompileOption {
	return func(o *compileOptions) { o.timeout = d }
}

// newRateLimiter builds the limiter of the rate_limit section.
func newRateLimiter(cfg *config.Config, now func() time.Time, opts []CompileOption) (RateLimiter, error) {
	var o compileOptions
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.RateLimit.Backend != "redis" {
		l := NewLocalRateLimiter(cfg.Callers.List, cfg.RateLimit.Default, now)
		if o.prev != nil {
			if prev, ok := o.prev.Limiter.(*LocalRateLimiter); ok {
				l.inherit(prev)
			}
		}
		return l, nil
	}
	if o.redis == nil {
		// Only a reload that switches the backend gets here: faxgate serve
		// connects to Redis at start when either user of it is configured.
		return nil, errors.New(`rate_limit.backend: "redis" takes a restart: no Redis connection was opened at start`)
	}
	return NewRedisRateLimiter(RedisRateOptions{
		Client:       o.redis,
		KeyPrefix:    cfg.Redis.KeyPrefix,
		Callers:      cfg.Callers.List,
		Default:      cfg.RateLimit.Default,
		ReplicasHint: cfg.RateLimit.ReplicasHint,
		Now:          now,
		Timeout:      o.timeout,
		Metrics:      o.metrics,
		Logger:       o.log,
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

// WithPrevious makes Compile carry rate-limit state over from the rules in
// force (a reload).
func WithPrevious(prev *Rules) CompileOption {
	return func(o *compileOptions) { o.prev = prev }
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
