package limit_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/policy/limit"
)

// redisClient is a client as faxgate serve builds it, for the server at addr.
func redisClient(t testing.TB, addr string) redis.UniversalClient {
	t.Helper()
	c, err := redisconn.New(config.Redis{Addrs: []string{addr}}, redisconn.Passwords{}, redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.Client()
}

// countingHook counts the commands a client sends (or tries to send).
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type limiterEnv struct {
	lim    *limit.RedisRateLimiter
	client redis.UniversalClient
	met    *limit.Metrics
	reg    *prometheus.Registry
	logs   *observer.ObservedLogs
	cmds   *countingHook
}

func newLimiter(t testing.TB, addr string, o limit.RedisRateOptions) *limiterEnv {
	t.Helper()
	e := &limiterEnv{client: redisClient(t, addr), reg: prometheus.NewPedanticRegistry(), cmds: &countingHook{}}
	e.client.AddHook(e.cmds)
	e.met = limit.NewMetrics(e.reg)
	core, logs := observer.New(zapcore.InfoLevel)
	e.logs = logs
	o.Client, o.Metrics, o.Logger = e.client, e.met, zap.New(core)
	if o.KeyPrefix == "" {
		o.KeyPrefix = "faxgate:"
	}
	if o.Timeout == 0 {
		// Generous: these tests are about decisions, not about a slow
		// Redis, and must not fall back on a loaded test machine.
		o.Timeout = 2 * time.Second
	}
	e.lim = limit.NewRedisRateLimiter(o)
	return e
}

// backendUp reads faxgate_rate_limit_backend_up through a scrape, so that
// reading it never creates its series; -1 when it has none.
func (e *limiterEnv) backendUp(t testing.TB) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "faxgate_rate_limit_backend_up" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

func (e *limiterEnv) fallbacks(caller string) float64 {
	return testutil.ToFloat64(e.met.RateLimitFallback.WithLabelValues(caller))
}

func callers(list ...config.Caller) []config.Caller { return list }

func caller(name string, rps float64, burst int) config.Caller {
	return config.Caller{Name: name, RateLimit: &config.Limit{RPS: rps, Burst: burst}}
}

// TestRedisBurstThenOnePerInterval: burst requests pass at once, the next
// waits one emission interval, and the RateLimit-* values say so.
func TestRedisBurstThenOnePerInterval(t *testing.T) {
	r := redistest.Start(t)
	const interval = 100 * time.Millisecond // rps 10
	e := newLimiter(t, r.Addr, limit.RedisRateOptions{Callers: callers(caller("a", 10, 5))})
	ctx := context.Background()

	start := time.Now()
	for k := 1; k <= 5; k++ {
		res := e.lim.Allow(ctx, "a")
		elapsed := time.Since(start)
		if !res.Allowed || res.Limit != 5 || res.Remaining != 5-k {
			t.Fatalf("request %d: %+v, want allowed, limit 5, remaining %d", k, res, 5-k)
		}
		// Full again k intervals after the first request, less the time gone by.
		if want := time.Duration(k) * interval; res.Reset > want || res.Reset < want-elapsed-time.Millisecond {
			t.Errorf("request %d: reset %v, want %v less at most %v", k, res.Reset, want, elapsed)
		}
	}
	denied := e.lim.Allow(ctx, "a")
	elapsed := time.Since(start)
	if denied.Allowed || denied.Remaining != 0 || denied.Limit != 5 {
		t.Fatalf("request 6: %+v, want denied, limit 5, remaining 0", denied)
	}
	if denied.RetryAfter > interval || denied.RetryAfter < interval-elapsed-time.Millisecond {
		t.Errorf("retry after %v, want %v less at most %v", denied.RetryAfter, interval, elapsed)
	}
	if want := 5 * interval; denied.Reset > want || denied.Reset < want-elapsed-time.Millisecond {
		t.Errorf("reset when denied %v, want %v less at most %v", denied.Reset, want, elapsed)
	}
	// A refusal costs nothing: asking again does not push the wait out.
	asked := time.Now()
	again := e.lim.Allow(ctx, "a")
	if again.Allowed || again.RetryAfter > denied.RetryAfter {
		t.Errorf("asking again: %+v, want denied with retry after <= %v", again, denied.RetryAfter)
	}

	// Wait until the bucket, read without deciding, has room again: no
	// sooner than the Retry-After said (a lower bound, which a slow machine
	// cannot break; 1 ms for Redis's clock and ours).
	eventually.Eventually(t, 5*time.Second, "the bucket to have room", func() bool {
		return bucketHasRoom(t, e.client, "faxgate:rl:a", 4*interval)
	})
	if waited := time.Since(asked); waited < again.RetryAfter-time.Millisecond {
		t.Errorf("the bucket had room %v after a Retry-After of %v", waited, again.RetryAfter)
	}
	if res := e.lim.Allow(ctx, "a"); !res.Allowed || res.Remaining != 0 {
		t.Errorf("after retry after: %+v, want allowed with remaining 0", res)
	}
	if res := e.lim.Allow(ctx, "a"); res.Allowed {
		t.Errorf("second after retry after: %+v, want denied: one per interval", res)
	}
	if got := e.backendUp(t); got != 1 {
		t.Errorf("backend_up = %v, want 1", got)
	}
	if got := e.fallbacks("a"); got != 0 {
		t.Errorf("fallbacks = %v, want 0", got)
	}
}

// bucketScript reads a caller's bucket without deciding (it writes
// nothing): Redis's time and the TAT, both in microseconds; the TAT is nil
// when the key is gone (the bucket is full).
var bucketScript = redis.NewScript(`
local t = redis.call('TIME')
return {tonumber(t[1]) * 1000000 + tonumber(t[2]), redis.call('GET', KEYS[1])}
`)

// bucketHasRoom reports whether the bucket at key would admit a request
// now, by the limiter's rule (TAT - tolerance <= now), on Redis's clock.
func bucketHasRoom(t testing.TB, c redis.UniversalClient, key string, tolerance time.Duration) bool {
	t.Helper()
	v, err := bucketScript.Run(context.Background(), c, []string{key}).Slice()
	if err != nil {
		t.Fatalf("reading the bucket: %v", err)
	}
	now, _ := v[0].(int64)
	if len(v) < 2 || v[1] == nil {
		return true
	}
	s, _ := v[1].(string)
	tat, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("the bucket's TAT %q: %v", s, err)
	}
	return tat-float64(tolerance.Microseconds()) <= float64(now)
}

// TestRedisNoBoundaryBurst hammers a caller across whole-second boundaries,
// where a fixed-window limiter lets its limit through twice in a moment: in
// no stretch of time may more pass than burst + rps x its length (+1 for
// the edges).
func TestRedisNoBoundaryBurst(t *testing.T) {
	r := redistest.Start(t)
	const rps, burst = 20.0, 5
	e := newLimiter(t, r.Addr, limit.RedisRateOptions{Callers: callers(caller("a", rps, burst))})

	// 2.2 s of asking spans at least two whole-second boundaries, wherever
	// it starts.
	stop := time.Now().Add(2200 * time.Millisecond)

	var mu sync.Mutex
	var admitted []time.Time
	var worst atomic.Int64 // slowest decision, ns
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) { // paces load: each goroutine asks for 2.2 s
				t0 := time.Now()
				res := e.lim.Allow(context.Background(), "a")
				t1 := time.Now()
				if d := int64(t1.Sub(t0)); d > worst.Load() {
					worst.Store(d)
				}
				if res.Allowed {
					mu.Lock()
					admitted = append(admitted, t1)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(admitted, func(a, b time.Time) int { return a.Compare(b) })
	slack := time.Duration(worst.Load()) // a decision happened up to this long before it was seen
	for i := range admitted {
		for j := i; j < len(admitted); j++ {
			span := admitted[j].Sub(admitted[i]) + slack
			if n, max := j-i+1, float64(burst)+span.Seconds()*rps+1; float64(n) > max {
				t.Fatalf("%d admitted within %v (from %s): more than burst + rps x span + 1 = %.1f",
					n, span, admitted[i].Format("15:04:05.000"), max)
			}
		}
	}
	// And the limiter is not simply stingy: about burst + rps x 2.2s pass
	// (less only on a machine too loaded to ask often enough).
	if n, want := len(admitted), burst+int(2.2*rps); n < want/2 {
		t.Errorf("%d admitted in 2.2s, want about %d", n, want)
	}
	t.Logf("%d admitted in 2.2s (rps %v, burst %d), slowest decision %v", len(admitted), rps, burst, slack)
	if e.fallbacks("a") != 0 {
		t.Errorf("%v decisions fell back to the local limiter with Redis up", e.fallbacks("a"))
	}
}

// TestRedisKeysExpire: a caller's key lives until its bucket is full again,
// under the configured prefix, so idle callers cost Redis nothing. The
// interval is long enough (500 ms) that a loaded machine does not let a key
// expire between two calls of the test; every bound that the test's own
// pace could shift is read against the time it took.
func TestRedisKeysExpire(t *testing.T) {
	r := redistest.Start(t)
	const interval = 500 * time.Millisecond // rps 2
	e := newLimiter(t, r.Addr, limit.RedisRateOptions{KeyPrefix: "fg-test:", Callers: callers(caller("a", 2, 5))})
	ctx := context.Background()
	rc := r.Client(t)

	start := time.Now()
	e.lim.Allow(ctx, "a")
	ttl, err := rc.PTTL(ctx, "fg-test:rl:a").Result()
	if err != nil || ttl <= 0 || ttl > interval {
		t.Fatalf("PTTL after one request = %v, %v; want in (0, %v]", ttl, err, interval)
	}
	for range 3 {
		e.lim.Allow(ctx, "a")
	}
	ttl, err = rc.PTTL(ctx, "fg-test:rl:a").Result()
	if elapsed := time.Since(start); err != nil || ttl < 4*interval-elapsed-2*time.Millisecond || ttl > 4*interval {
		t.Fatalf("PTTL after four requests = %v, %v; want %v less at most the %v gone by", ttl, err, 4*interval, elapsed)
	}
	// The value is the theoretical arrival time, in microseconds of Redis time.
	tat, err := rc.Get(ctx, "fg-test:rl:a").Float64()
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	srv, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(tat-float64(srv.UnixMicro())) * time.Microsecond; d <= 0 || d > 4*interval {
		t.Errorf("TAT is %v after Redis TIME, want in (0, %v]", d, 4*interval)
	}
	if keys, _ := rc.Keys(ctx, "*").Result(); !slices.Equal(keys, []string{"fg-test:rl:a"}) {
		t.Errorf("keys = %v, want only fg-test:rl:a", keys)
	}

	eventually.Eventually(t, 5*time.Second, "the key to expire once its bucket is full", func() bool {
		return rc.Exists(ctx, "fg-test:rl:a").Val() == 0
	})
	// Not before: the bucket fills 4 intervals after the first request.
	if lived := time.Since(start); lived < 4*interval-2*time.Millisecond {
		t.Errorf("the key expired %v after the first request, before its bucket was full (%v)", lived, 4*interval)
	}
	// Gone means full: the whole burst passes again.
	for k := range 5 {
		if res := e.lim.Allow(ctx, "a"); !res.Allowed {
			t.Fatalf("request %d after expiry denied: %+v", k+1, res)
		}
	}
}

// TestRedisCallersIndependent: one caller's exhaustion leaves another's
// quota alone; each has its own limit (own rate_limit, or the default).
func TestRedisCallersIndependent(t *testing.T) {
	r := redistest.Start(t)
	e := newLimiter(t, r.Addr, limit.RedisRateOptions{
		Callers: callers(caller("a", 1, 2), config.Caller{Name: "b"}),
		Default: config.Limit{RPS: 1, Burst: 3},
	})
	ctx := context.Background()
	for _, tc := range []struct {
		caller string
		burst  int
	}{{"a", 2}, {"b", 3}, {"unconfigured", 3}} {
		t.Run(tc.caller, func(t *testing.T) {
			for k := range tc.burst {
				if res := e.lim.Allow(ctx, tc.caller); !res.Allowed || res.Limit != tc.burst {
					t.Fatalf("request %d: %+v, want allowed with limit %d", k+1, res, tc.burst)
				}
			}
			if res := e.lim.Allow(ctx, tc.caller); res.Allowed {
				t.Fatalf("request %d: %+v, want denied", tc.burst+1, res)
			}
		})
	}
}

// TestRedisBucketSharedByReplicas: two limiters (two replicas, each with its
// own connection) draw from one bucket per caller; another key prefix (another
// deployment on the same Redis) from another.
func TestRedisBucketSharedByReplicas(t *testing.T) {
	r := redistest.Start(t)
	o := limit.RedisRateOptions{Callers: callers(caller("a", 1, 4))}
	r1, r2 := newLimiter(t, r.Addr, o), newLimiter(t, r.Addr, o)
	ctx := context.Background()
	admitted := 0
	for k := range 8 {
		if (map[bool]*limiterEnv{true: r1, false: r2})[k%2 == 0].lim.Allow(ctx, "a").Allowed {
			admitted++
		}
	}
	if admitted != 4 {
		t.Errorf("two replicas admitted %d at once, want the one burst of 4", admitted)
	}
	o.KeyPrefix = "other:"
	if res := newLimiter(t, r.Addr, o).lim.Allow(ctx, "a"); !res.Allowed || res.Remaining != 3 {
		t.Errorf("another prefix: %+v, want a fresh bucket", res)
	}
}

// TestRedisRebuiltLimiterKeepsState: a config reload rebuilds the limiter;
// the caller's bucket lives in Redis and is not refilled by it.
func TestRedisRebuiltLimiterKeepsState(t *testing.T) {
	r := redistest.Start(t)
	o := limit.RedisRateOptions{Callers: callers(caller("a", 1, 3))}
	old := newLimiter(t, r.Addr, o)
	for range 3 {
		old.lim.Allow(context.Background(), "a")
	}
	if res := newLimiter(t, r.Addr, o).lim.Allow(context.Background(), "a"); res.Allowed {
		t.Errorf("after a rebuild: %+v, want still denied", res)
	}
}

// TestRedisFallbackAndRecovery: with Redis gone each decision is local at
// rps / replicas_hint, counted, without trying Redis more than once per
// cooldown; once Redis is back, the limiter returns to it by itself.
func TestRedisFallbackAndRecovery(t *testing.T) {
	r := redistest.Start(t)
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// Shared: 30 rps, burst 6. Local share with 3 replicas: 10 rps, burst 2.
	e := newLimiter(t, r.Addr, limit.RedisRateOptions{Callers: callers(caller("a", 30, 6)), ReplicasHint: 3, Now: clock.Now})
	ctx := context.Background()

	if res := e.lim.Allow(ctx, "a"); !res.Allowed || res.Limit != 6 {
		t.Fatalf("with Redis: %+v, want allowed, limit 6", res)
	}
	if got := e.backendUp(t); got != 1 {
		t.Fatalf("backend_up = %v with Redis up, want 1", got)
	}

	r.Kill()
	before := e.cmds.n.Load()
	var got []bool
	for range 4 {
		res := e.lim.Allow(ctx, "a")
		if res.Limit != 2 {
			t.Fatalf("during the outage: %+v, want the local limit 2", res)
		}
		got = append(got, res.Allowed)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(got, want) {
		t.Errorf("local decisions = %v, want %v (burst 6/3)", got, want)
	}
	if n := e.cmds.n.Load() - before; n != 1 {
		t.Errorf("%d commands tried on the dead Redis within the cooldown, want 1", n)
	}
	if got := e.fallbacks("a"); got != 4 {
		t.Errorf("fallbacks = %v, want 4", got)
	}
	if got := e.backendUp(t); got != 0 {
		t.Errorf("backend_up = %v during the outage, want 0", got)
	}
	// The local limit refills at 10 rps: one more after 100ms.
	clock.Advance(100 * time.Millisecond)
	if res := e.lim.Allow(ctx, "a"); !res.Allowed {
		t.Errorf("local decision after 100ms: %+v, want allowed (10 rps)", res)
	}

	// After the cooldown one request tries Redis again, and only one.
	clock.Advance(time.Second)
	before = e.cmds.n.Load()
	for range 3 {
		e.lim.Allow(ctx, "a")
	}
	if n := e.cmds.n.Load() - before; n != 1 {
		t.Errorf("%d commands after the cooldown, want 1 probe", n)
	}

	r.Restart(t)
	clock.Advance(1100 * time.Millisecond)
	res := e.lim.Allow(ctx, "a")
	if !res.Allowed || res.Limit != 6 || res.Remaining != 5 {
		t.Errorf("after Redis restarted: %+v, want a shared decision (limit 6, remaining 5)", res)
	}
	if got := e.backendUp(t); got != 1 {
		t.Errorf("backend_up = %v after recovery, want 1", got)
	}
	before = e.cmds.n.Load()
	for range 3 {
		e.lim.Allow(ctx, "a")
	}
	if n := e.cmds.n.Load() - before; n != 3 {
		t.Errorf("%d commands for 3 decisions after recovery, want 3: every decision is shared again", n)
	}
	if got := e.fallbacks("a"); got != 8 {
		t.Errorf("fallbacks = %v, want 8", got)
	}

	// One warning for the outage (more are 30s apart), one note of its end.
	warn := e.logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warn) != 1 || !strings.Contains(warn[0].Message, "Redis unreachable or too slow") {
		t.Errorf("warnings = %v, want one saying Redis is unreachable", warn)
	}
	info := e.logs.FilterMessageSnippet("answers again").All()
	if len(info) != 1 {
		t.Errorf("recovery notes = %v, want one", info)
	}

	golden := `
# HELP faxgate_rate_limit_backend_up 1 while this replica's rate limits are decided in Redis, 0 while it limits locally because Redis is unreachable; absent with rate_limit.backend: local.
# TYPE faxgate_rate_limit_backend_up gauge
faxgate_rate_limit_backend_up 1
# HELP faxgate_rate_limit_fallback_total Rate-limit decisions made locally at rps / replicas_hint because Redis was unreachable or slow (rate_limit.backend: redis), by caller.
# TYPE faxgate_rate_limit_fallback_total counter
faxgate_rate_limit_fallback_total{caller="a"} 8
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(golden),
		"faxgate_rate_limit_backend_up", "faxgate_rate_limit_fallback_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(e.reg, "faxgate_rate_limit_backend_up", "faxgate_rate_limit_fallback_total"); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}

// TestRedisMetricsAbsentUntilUsed: a local-backend gateway never shows
// backend_up (a 0 would read as an outage); a Redis limiter shows its
// callers' fallback counters at 0 from the start.
func TestRedisMetricsAbsentUntilUsed(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := limit.NewMetrics(reg)
	if n, err := testutil.GatherAndCount(reg, "faxgate_rate_limit_backend_up", "faxgate_rate_limit_fallback_total"); err != nil || n != 0 {
		t.Errorf("%d series before any Redis limiter (err %v), want 0", n, err)
	}
	limit.NewRedisRateLimiter(limit.RedisRateOptions{Metrics: m, Callers: callers(caller("a", 1, 1), caller("b", 1, 1))})
	if n, err := testutil.GatherAndCount(reg, "faxgate_rate_limit_fallback_total"); err != nil || n != 2 {
		t.Errorf("%d fallback series for 2 callers (err %v), want 2", n, err)
	}
	// Regression: the limiter's construction created backend_up at 0, so a
	// replica that decided nothing for 10 minutes after its start fired
	// FaxgateRateLimitFallback.
	if n, err := testutil.GatherAndCount(reg, "faxgate_rate_limit_backend_up"); err != nil || n != 0 {
		t.Errorf("%d backend_up series before any decision (err %v), want 0", n, err)
	}
}

// TestRedisSlowRedisCostsAtMostTheTimeout: a Redis that accepts but never
// answers delays one request by the timeout, then none for the cooldown.
func TestRedisSlowRedisCostsAtMostTheTimeout(t *testing.T) {
	r := redistest.Start(t)
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const timeout = 50 * time.Millisecond
	e := newLimiter(t, r.Addr, limit.RedisRateOptions{Callers: callers(caller("a", 30, 6)), ReplicasHint: 3,
		Now: clock.Now, Timeout: timeout})
	ctx := context.Background()
	// A pooled connection and a cached script, as in steady traffic.
	for i := 0; e.lim.Allow(ctx, "a").Limit != 6; i++ {
		if i == 20 {
			t.Fatal("no shared decision with Redis up")
		}
		clock.Advance(1100 * time.Millisecond)
	}
	e.logs.TakeAll()

	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Signal(syscall.SIGCONT) })
	t0 := time.Now()
	res := e.lim.Allow(ctx, "a")
	// At least the timeout, and under the client's own 1 s read timeout:
	// the decision's deadline reaches the socket. (The upper bound leaves
	// a loaded machine 950 ms; the read timeout is what it tells apart.)
	if d := time.Since(t0); d < timeout || d >= time.Second {
		t.Errorf("decision with a hung Redis took %v, want the timeout %v (plus scheduling), under the read timeout", d, timeout)
	}
	if !res.Allowed || res.Limit != 2 {
		t.Errorf("decision with a hung Redis: %+v, want a local one (limit 2)", res)
	}
	// Within the cooldown nothing is asked of Redis, so nothing waits for it.
	before := e.cmds.n.Load()
	e.lim.Allow(ctx, "a")
	if n := e.cmds.n.Load() - before; n != 0 {
		t.Errorf("a decision within the cooldown sent %d commands to the hung Redis, want none", n)
	}
	if warn := e.logs.FilterLevelExact(zapcore.WarnLevel).All(); len(warn) != 1 || !strings.Contains(warn[0].Message, "too slow") {
		t.Errorf("warnings = %v, want one saying Redis is unreachable or too slow", warn)
	}

	if err := r.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		clock.Advance(1100 * time.Millisecond)
		if res := e.lim.Allow(ctx, "a"); res.Limit == 6 && e.backendUp(t) == 1 {
			break
		}
		if i == 20 {
			t.Fatal("not shared again after Redis resumed")
		}
	}
}

// TestRedisCanceledRequestIsNotAnOutage: a request whose client left ends
// its Redis call; that says nothing about Redis.
func TestRedisCanceledRequestIsNotAnOutage(t *testing.T) {
	r := redistest.Start(t)
	e := newLimiter(t, r.Addr, limit.RedisRateOptions{Callers: callers(caller("a", 30, 6))})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.lim.Allow(ctx, "a")
	if e.fallbacks("a") != 0 || len(e.logs.All()) != 0 {
		t.Errorf("a canceled request counted as a fallback (%v) or logged %v", e.fallbacks("a"), e.logs.All())
	}
	if res := e.lim.Allow(context.Background(), "a"); res.Limit != 6 {
		t.Errorf("next decision %+v, want a shared one", res)
	}
}

// TestNewRateLimiterBackend: NewRateLimiter picks the limiter of
// rate_limit.backend, and refuses redis without a client.
func TestNewRateLimiterBackend(t *testing.T) {
	r := redistest.Start(t)
	client := redisClient(t, r.Addr)
	met := limit.NewMetrics(prometheus.NewRegistry())
	shared := limit.Deps{Redis: client, Metrics: met, Logger: zap.NewNop()}
	for _, tc := range []struct {
		backend string
		deps    limit.Deps
		want    string // limiter type, or "error"
	}{
		{"local", limit.Deps{}, "*limit.LocalRateLimiter"},
		{"local", shared, "*limit.LocalRateLimiter"},
		{"redis", shared, "*limit.RedisRateLimiter"},
		{"redis", limit.Deps{}, "error"},
	} {
		t.Run(fmt.Sprintf("%s/redis-%v", tc.backend, tc.deps.Redis != nil), func(t *testing.T) {
			cfg, err := config.Parse([]byte("upstream:\n  base_url: https://api.example.com\n  api_key_env: K\n"+
				"callers:\n  list:\n    - name: a\n      cidrs: [\"10.0.0.0/8\"]\n      allow: [\"*\"]\n"+
				"rate_limit:\n  backend: "+tc.backend+"\n"), func(string) (string, bool) { return "k", true })
			if err != nil {
				t.Fatal(err)
			}
			l, err := limit.NewRateLimiter(limit.RateConfig{RateLimit: cfg.RateLimit, Callers: cfg.Callers.List, KeyPrefix: cfg.Redis.KeyPrefix}, time.Now, tc.deps, nil)
			got := "error"
			if err == nil {
				got = fmt.Sprintf("%T", l)
			}
			if got != tc.want {
				t.Errorf("limiter = %s (err %v), want %s", got, err, tc.want)
			}
		})
	}
}

// --- Benchmarks ---

// BenchmarkRedisRateLimiter measures one shared decision: a round trip to a
// local Redis and the script. BenchmarkLocalRateLimiter is the baseline.
func BenchmarkRedisRateLimiter(b *testing.B) {
	r := redistest.Start(b)
	cs := callers(caller("a", 1e6, 1e9)) // never denies
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			e := newLimiter(b, r.Addr, limit.RedisRateOptions{KeyPrefix: "bench:", Callers: cs})
			b.ReportAllocs()
			if parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						e.lim.Allow(context.Background(), "a")
					}
				})
			} else {
				ctx := context.Background()
				for b.Loop() {
					e.lim.Allow(ctx, "a")
				}
			}
			b.StopTimer()
			if n := e.fallbacks("a"); n != 0 {
				b.Fatalf("%v decisions were local, not shared: %v", n, e.logs.All())
			}
		})
	}
}

func BenchmarkLocalRateLimiter(b *testing.B) {
	lim := limit.NewLocalRateLimiter(callers(caller("a", 1e9, 1e9)), config.Limit{RPS: 1, Burst: 1}, time.Now)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lim.Allow(ctx, "a")
	}
}
