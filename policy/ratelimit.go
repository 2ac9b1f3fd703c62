package policy

import (
	"math"
	"sync"
	"time"

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

// RateLimiter decides whether a caller may make one more request now.
type RateLimiter interface {
	Allow(caller string) RateResult
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

// Allow implements RateLimiter.
func (l *LocalRateLimiter) Allow(caller string) RateResult {
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
