package policy

import (
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/policy/limit"
)

// CompileOption gives Compile what the configuration alone cannot: live
// connections, the parts they report to, and the rules in force before a
// reload.
type CompileOption func(*compileOptions)

type compileOptions struct {
	prev *Rules
	deps limit.Deps
}

// WithRedis is the Redis client through which rate_limit.backend: redis
// shares limits and the upstream budget, with the metrics and logger of
// those limits. Compile ignores it with backend local.
func WithRedis(client redis.UniversalClient, m *limit.Metrics, log *zap.Logger) CompileOption {
	return func(o *compileOptions) { o.deps.Redis, o.deps.Metrics, o.deps.Logger = client, m, log }
}

// WithMetrics gives the compiled rules the metrics they report to (the
// upstream budget's, whatever the backend).
func WithMetrics(m *limit.Metrics) CompileOption {
	return func(o *compileOptions) { o.deps.Metrics = m }
}

// WithRedisTimeout bounds each shared rate-limit and budget decision
// (default limit.DefaultRedisRateTimeout); after it the request is decided
// locally.
func WithRedisTimeout(d time.Duration) CompileOption {
	return func(o *compileOptions) { o.deps.Timeout = d }
}

// WithPrevious makes Compile carry rate-limit and budget state over from
// the rules in force (a reload).
func WithPrevious(prev *Rules) CompileOption {
	return func(o *compileOptions) { o.prev = prev }
}

// WithTracer records the shared rate-limit and budget decisions asked of
// Redis as spans (docs/tracing.md); without it (tracing off) none is made.
func WithTracer(t trace.Tracer) CompileOption {
	return func(o *compileOptions) { o.deps.Tracer = t }
}
