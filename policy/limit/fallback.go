package limit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/tracing"
)

// The shared rate limits and the shared upstream budget use Redis the same
// way: every decision goes to Redis while it answers within the timeout;
// when it fails, the replica decides alone (at its share of the limit) for
// redisRateCooldown, then one decision tries Redis again, so an outage does
// not add the timeout to every request. One warning is logged per
// redisRateWarnEvery of an outage, and one line when Redis answers again.

// Values of redisFallback.state; 0 is before the first decision.
const (
	stateShared int32 = iota + 1
	stateLocal
)

// redisFallback is that logic, once.
type redisFallback struct {
	cool    cooldown
	timeout time.Duration
	log     *zap.Logger
	// upMsg and downMsg are the log lines of a recovery and of an outage;
	// downFields go on the outage's line after the error.
	upMsg, downMsg string
	downFields     []zap.Field
	// backendUp, when set, is 1 while Redis decides and 0 while this
	// replica decides alone. Its one series is created by the first
	// decision, not before: a 0 before any decision would read as an outage.
	backendUp *prometheus.GaugeVec
	// tracer, when set, records each decision asked of Redis as a span
	// named spanName under the request's (docs/tracing.md); nil when
	// tracing is off.
	tracer   trace.Tracer
	spanName string

	stateMu  sync.Mutex   // orders transitions, so the gauge and logs agree with state
	state    atomic.Int32 // stateShared or stateLocal; 0 before the first decision
	lastWarn time.Time    // guarded by stateMu
	warned   bool         // an outage was logged and its end not yet; guarded by stateMu
}

// decideShared asks Redis (remote, under the timeout) or, while Redis is
// failing, decides locally, counting the local decision in fallback. When
// the request itself ends while Redis is asked (its client left), that is
// no news about Redis: gone answers, and nothing is counted.
func decideShared[R any](f *redisFallback, ctx context.Context, now time.Time, fallback prometheus.Counter,
	remote func(context.Context) (R, error), local, gone func() R) R {
	if f.cool.try(now) {
		rctx, cancel := context.WithTimeout(ctx, f.timeout)
		rctx, span := tracing.Child(rctx, f.tracer, f.spanName, redisSpan...)
		res, err := remote(rctx)
		cancel()
		if span.IsRecording() {
			endRedisSpan(span, err, ctx.Err() != nil)
		}
		if err == nil {
			f.ok()
			return res
		}
		if ctx.Err() != nil {
			return gone()
		}
		f.failed(now, err)
	}
	fallback.Inc()
	return local()
}

// redisSpan are the options of a decision's span: a call to Redis.
var redisSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
	trace.WithAttributes(tracing.Redis, attribute.String("db.operation.name", "EVALSHA"))}

// endRedisSpan ends a decision's span, saying who decided. The error is
// not recorded: a fixed description says what happened, and no Redis
// reply or address reaches the trace.
func endRedisSpan(span trace.Span, err error, gone bool) {
	switch {
	case err == nil:
		span.SetAttributes(tracing.Backend.String("redis"))
	case gone:
		span.SetAttributes(tracing.Result.String("caller_gone"))
	default:
		span.SetAttributes(tracing.Backend.String("local"))
		span.SetStatus(codes.Error, "Redis failed or was too slow; decided locally")
	}
	span.End()
}

func (f *redisFallback) ok() {
	f.cool.ok()
	if f.state.Load() == stateShared {
		return
	}
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	if f.state.Load() == stateShared {
		return
	}
	f.state.Store(stateShared)
	if f.backendUp != nil {
		f.backendUp.WithLabelValues().Set(1)
	}
	if f.warned {
		f.warned = false
		f.log.Info(f.upMsg)
	}
}

func (f *redisFallback) failed(now time.Time, err error) {
	f.cool.failed(now)
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	if f.state.Swap(stateLocal) != stateLocal && f.backendUp != nil {
		f.backendUp.WithLabelValues().Set(0)
	}
	if f.lastWarn.IsZero() || now.Sub(f.lastWarn) >= redisRateWarnEvery {
		f.lastWarn, f.warned = now, true
		// Whether Redis is down or slow is seldom clear within the timeout
		// (the client's dial retries outlast it), so one message says both.
		f.log.Warn(f.downMsg, append([]zap.Field{zap.Error(err)}, f.downFields...)...)
	}
}

// cooldown spaces the attempts to use a Redis that just failed: while it
// answers every decision goes to it; after a failure, decisions are made
// locally for redisRateCooldown, then one decision tries Redis again (and
// moves the next try a cooldown on).
type cooldown struct {
	retryAt atomic.Int64 // Unix ns when Redis may be tried again; 0 while it answers
}

// try reports whether this decision goes to Redis.
func (c *cooldown) try(now time.Time) bool {
	at := c.retryAt.Load()
	if at == 0 {
		return true
	}
	if now.UnixNano() < at {
		return false
	}
	return c.retryAt.CompareAndSwap(at, now.Add(redisRateCooldown).UnixNano())
}

// ok records an answer from Redis.
func (c *cooldown) ok() {
	if c.retryAt.Load() != 0 {
		c.retryAt.Store(0)
	}
}

// failed records a failure at now.
func (c *cooldown) failed(now time.Time) {
	c.retryAt.Store(now.Add(redisRateCooldown).UnixNano())
}

// sharedDefaults fills in what the options of a shared limit left unset:
// the wall clock, DefaultRedisRateTimeout, metrics on a registry nobody
// scrapes, and no logging.
func sharedDefaults(now *func() time.Time, timeout *time.Duration, m **Metrics, log **zap.Logger) {
	if *now == nil {
		*now = time.Now
	}
	if *timeout <= 0 {
		*timeout = DefaultRedisRateTimeout
	}
	if *m == nil {
		*m = NewMetrics(prometheus.NewRegistry())
	}
	if *log == nil {
		*log = zap.NewNop()
	}
}

// States of a limit shared through Redis, as SharedState reports them
// (docs/status-page.md).
const (
	SharedUp       = "up"       // Redis decides
	SharedFallback = "fallback" // Redis failed: this replica decides alone at its replicas_hint share
	SharedUnknown  = "unknown"  // no decision yet since start or reload
)

// Shared is a limit shared through Redis (the rate limiter or the upstream
// budget with rate_limit.backend: redis).
type Shared interface {
	// SharedState is SharedUp, SharedFallback or SharedUnknown.
	SharedState() string
}

func (f *redisFallback) sharedState() string {
	switch f.state.Load() {
	case stateShared:
		return SharedUp
	case stateLocal:
		return SharedFallback
	}
	return SharedUnknown
}

var (
	_ Shared = (*RedisRateLimiter)(nil)
	_ Shared = (*RedisBudget)(nil)
)

// SharedState implements Shared.
func (l *RedisRateLimiter) SharedState() string { return l.redis.sharedState() }

// SharedState implements Shared.
func (b *RedisBudget) SharedState() string { return b.redis.sharedState() }
