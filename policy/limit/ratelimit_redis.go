package limit

// Shared rate limits (rate_limit.backend: redis).
//
// Every replica decides every request with one Lua script on the caller's key
// P + "rl:" + caller (P is redis.key_prefix, e.g. faxgate:rl:intake), so the
// fleet together admits what one replica with the caller's rate_limit would.
// The script is GCRA, the token bucket written as a single timestamp: the key
// holds the caller's theoretical arrival time (TAT), the Redis server time in
// microseconds at which the bucket would be full again had every admitted
// request arrived exactly one emission interval T = 1/rps after the last. A
// request is admitted when TAT - (burst-1)*T <= now, and moves TAT to
// max(TAT, now) + T. Burst requests pass at once, then one per T; there is no
// window whose boundary lets twice the limit through.
//
// The clock is Redis's (TIME inside the script), so replicas' clocks may
// disagree without effect. The key expires when the bucket is full again, so
// idle callers cost no memory. A limit changed by a config reload applies from
// the next decision on: the TAT stays meaningful under a new T.
//
// Redis is on the request path, so each decision waits at most Timeout. When
// Redis fails or is slow, the replica decides locally at rps / replicas_hint
// (so N replicas together stay near the limit), counts the decision in
// faxgate_rate_limit_fallback_total, and tries Redis again after a cooldown,
// one request at a time, returning to shared limits by itself.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/config"
)

// DefaultRedisRateTimeout bounds one shared decision when
// RedisRateOptions.Timeout is zero: a local Redis answers in well under a
// millisecond, and a request should never wait long for its quota.
const DefaultRedisRateTimeout = 50 * time.Millisecond

const (
	// redisRateCooldown is how long a replica limits locally after Redis
	// failed before one request tries it again, so an outage does not add
	// the timeout to every request.
	redisRateCooldown = time.Second
	// redisRateWarnEvery spaces the warnings of an outage.
	redisRateWarnEvery = 30 * time.Second
)

// gcraScript decides one request. KEYS[1] holds the TAT in microseconds of
// Redis time; ARGV[1] is the emission interval T and ARGV[2] the tolerance
// (burst-1)*T, both in microseconds. It returns {allowed (1 or 0), remaining,
// reset, retry_after}, the last two in microseconds: reset until the bucket is
// full, retry_after until one request would be admitted (0 when allowed).
//
// TIME makes the script non-deterministic: Redis 3.2 and 4 replicate it only
// after replicate_commands(); Redis 5 and later replicate a script's effects
// by default, and 7 keeps the function as a no-op. The TAT is written with
// %.17g because Redis turns a Lua number into a string with %.14g, which
// would round a microsecond timestamp.
var gcraScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local allow_at = tat - tolerance
if allow_at > now then
  return {0, 0, math.ceil(tat - now), math.ceil(allow_at - now)}
end
local new = tat + interval
redis.call('SET', KEYS[1], string.format('%.17g', new), 'PX', math.max(1, math.ceil((new - now) / 1000)))
return {1, math.floor((now + tolerance + interval - new) / interval), math.ceil(new - now), 0}
`)

// RedisRateOptions configures a RedisRateLimiter.
type RedisRateOptions struct {
	// Client is the Redis connection (internal/redisconn.New). The
	// Timeout reaches the socket only when it was built with
	// ContextTimeoutEnabled, as redisconn.New's is.
	Client redis.UniversalClient
	// KeyPrefix is redis.key_prefix; a caller's key is KeyPrefix + "rl:" + name.
	KeyPrefix string
	// Callers and Default are callers.list and rate_limit.default.
	Callers []config.Caller
	Default config.Limit
	// ReplicasHint is rate_limit.replicas_hint: while Redis is unreachable
	// this replica admits rps / ReplicasHint with a burst of burst /
	// ReplicasHint (at least 1). Default 1.
	ReplicasHint int
	// Now is the clock of the local fallback and of the cooldown; shared
	// decisions use Redis's clock. Default time.Now.
	Now func() time.Time
	// Timeout bounds one shared decision. Default DefaultRedisRateTimeout.
	Timeout time.Duration
	// Metrics receives faxgate_rate_limit_fallback_total and
	// faxgate_rate_limit_backend_up. Default: a registry nobody scrapes.
	Metrics *Metrics
	// Logger is the limiter's logger. Default: none.
	Logger *zap.Logger
	// Tracer records each decision asked of Redis as a span
	// "ratelimit.redis" (docs/tracing.md). Default: none.
	Tracer trace.Tracer
}

// RedisRateLimiter enforces each caller's limit across all replicas through
// Redis (rate_limit.backend: redis), falling back to a local limiter at
// rps / replicas_hint while Redis is unreachable.
type RedisRateLimiter struct {
	client  redis.UniversalClient
	prefix  string
	def     config.Limit
	hint    int
	now     func() time.Time
	timeout time.Duration
	log     *zap.Logger
	met     *Metrics

	limits map[string]*sharedLimit // by caller name; read-only after construction
	mu     sync.Mutex              // guards extra
	extra  map[string]*sharedLimit
	local  *LocalRateLimiter

	redis redisFallback
}

var _ RateLimiter = (*RedisRateLimiter)(nil)

// sharedLimit is one caller's script arguments, built once.
type sharedLimit struct {
	keys     []string
	args     []any
	burst    int
	fallback prometheus.Counter
}

// NewRedisRateLimiter builds the limiter; it does not contact Redis.
func NewRedisRateLimiter(o RedisRateOptions) *RedisRateLimiter {
	if o.ReplicasHint < 1 {
		o.ReplicasHint = 1
	}
	sharedDefaults(&o.Now, &o.Timeout, &o.Metrics, &o.Logger)
	l := &RedisRateLimiter{
		client: o.Client, prefix: o.KeyPrefix, def: o.Default, hint: o.ReplicasHint,
		now: o.Now, timeout: o.Timeout, log: o.Logger, met: o.Metrics,
		limits: make(map[string]*sharedLimit, len(o.Callers)),
		extra:  map[string]*sharedLimit{},
	}
	local := make([]config.Caller, 0, len(o.Callers))
	for _, c := range o.Callers {
		lim := o.Default
		if c.RateLimit != nil {
			lim = *c.RateLimit
		}
		l.limits[c.Name] = l.newShared(c.Name, lim)
		share := l.localShare(lim)
		local = append(local, config.Caller{Name: c.Name, RateLimit: &share})
	}
	l.local = NewLocalRateLimiter(local, l.localShare(o.Default), o.Now)
	l.redis = redisFallback{timeout: o.Timeout, log: o.Logger,
		upMsg:      "Redis answers again: rate limits are shared by the fleet again",
		downMsg:    "Redis unreachable or too slow: limiting locally at rps / replicas_hint",
		downFields: []zap.Field{zap.Int("replicas_hint", l.hint), zap.Duration("retry_every", redisRateCooldown), zap.Duration("timeout", o.Timeout)},
		backendUp:  o.Metrics.RateLimitBackendUp,
		tracer:     o.Tracer, spanName: "ratelimit.redis"}
	return l
}

func (l *RedisRateLimiter) newShared(caller string, lim config.Limit) *sharedLimit {
	interval := 1e6 / lim.RPS // microseconds
	return &sharedLimit{
		keys: []string{l.prefix + "rl:" + caller},
		args: []any{
			strconv.FormatFloat(interval, 'g', -1, 64),
			strconv.FormatFloat(float64(lim.Burst-1)*interval, 'g', -1, 64),
		},
		burst: lim.Burst,
		// Present at 0 from the start, so rate() works before an outage.
		fallback: l.met.RateLimitFallback.WithLabelValues(caller),
	}
}

// localShare is this replica's part of lim while Redis is unreachable.
func (l *RedisRateLimiter) localShare(lim config.Limit) config.Limit {
	return config.Limit{RPS: lim.RPS / float64(l.hint), Burst: max(1, lim.Burst/l.hint)}
}

// Allow implements RateLimiter: it asks Redis, or decides locally while Redis
// is failing. It waits for Redis at most the Timeout, and never errs.
func (l *RedisRateLimiter) Allow(ctx context.Context, caller string) RateResult {
	lim := l.limit(caller)
	local := func() RateResult { return l.local.Allow(ctx, caller) }
	return decideShared(&l.redis, ctx, l.now(), lim.fallback,
		func(ctx context.Context) (RateResult, error) { return l.decide(ctx, lim) }, local, local)
}

// decide runs the script for one request.
func (l *RedisRateLimiter) decide(ctx context.Context, lim *sharedLimit) (RateResult, error) {
	v, err := gcraScript.Run(ctx, l.client, lim.keys, lim.args...).Int64Slice()
	if err != nil {
		return RateResult{}, err
	}
	if len(v) != 4 {
		return RateResult{}, fmt.Errorf("rate-limit script returned %d values, want 4", len(v))
	}
	return RateResult{
		Allowed:    v[0] == 1,
		Limit:      lim.burst,
		Remaining:  int(min(max(v[1], 0), int64(lim.burst))),
		Reset:      time.Duration(max(v[2], 0)) * time.Microsecond,
		RetryAfter: time.Duration(max(v[3], 0)) * time.Microsecond,
	}, nil
}

// limit returns a caller's script arguments. The identifier only returns
// configured names; another name gets the default limit, as with the local
// limiter.
func (l *RedisRateLimiter) limit(caller string) *sharedLimit {
	if s := l.limits[caller]; s != nil {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.extra[caller]
	if s == nil {
		s = l.newShared(caller, l.def)
		l.extra[caller] = s
	}
	return s
}
