package limit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/policy/limit"
)

func budgetOf(limits []config.BudgetLimit, shares map[string]config.Share) config.UpstreamBudget {
	return config.UpstreamBudget{HonorRetryAfter: true, MaxHold: time.Minute, Limits: limits, Shares: shares}
}

type budgetReplica struct {
	b    *limit.RedisBudget
	met  *limit.Metrics
	cmds *countingHook
}

// replicas builds n RedisBudgets over one Redis, as n gateways would.
func replicas(t testing.TB, addr string, n int, bud config.UpstreamBudget, hint int) []budgetReplica {
	t.Helper()
	return replicasAt(t, addr, n, bud, hint, nil)
}

// replicasAt is replicas whose local clock (the fallback's windows and
// cooldown) is now; nil is the wall clock.
func replicasAt(t testing.TB, addr string, n int, bud config.UpstreamBudget, hint int, now func() time.Time) []budgetReplica {
	t.Helper()
	var out []budgetReplica
	for range n {
		c := redisClient(t, addr)
		h := &countingHook{}
		c.AddHook(h)
		m := limit.NewMetrics(prometheus.NewRegistry())
		out = append(out, budgetReplica{met: m, cmds: h, b: limit.NewRedisBudget(limit.RedisBudgetOptions{
			Client: c, KeyPrefix: "faxgate:", Budget: bud, ReplicasHint: hint, Metrics: m, Now: now,
			Timeout: 2 * time.Second, Routes: []string{"contacts.list", "faxes.send"},
		})})
	}
	return out
}

// TestRedisBudgetSharesReservesAcrossReplicas: three replicas share one
// window; the reserved caller gets its reserve, the greedy one the rest,
// and the fleet's total is exactly the limit, one round trip per decision.
func TestRedisBudgetSharesReservesAcrossReplicas(t *testing.T) {
	r := redistest.Start(t)
	bud := budgetOf([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 20, Per: time.Minute}},
		map[string]config.Share{"intake": {Reserve: 0.25}})
	reps := replicas(t, r.Addr, 3, bud, 3)
	ctx := context.Background()
	var batch, intake atomic.Int64
	var wg sync.WaitGroup
	for i, rep := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if rep.b.Admit(ctx, "batch", "contacts.list", nil).Allowed {
					batch.Add(1)
				}
				if i == 0 && rep.b.Admit(ctx, "intake", "contacts.list", nil).Allowed {
					intake.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// The window fills exactly; batch never takes intake's reserve, while
	// intake, first come first served, may also win slots of the shared
	// pool (15 or 14 for batch are both right; 16 is not).
	if batch.Load()+intake.Load() != 20 || batch.Load() > 15 || intake.Load() < 5 {
		t.Errorf("batch %d (want at most the 15 unreserved), intake %d (want at least its 5), 20 in all", batch.Load(), intake.Load())
	}
	if n, decisions := redistest.ScriptRuns(t, r.Client(t)), int64(3*20+20); n != decisions {
		t.Errorf("Redis ran the script %d times for %d decisions, want one each", n, decisions)
	}
	d := reps[1].b.Admit(ctx, "batch", "contacts.list", nil)
	if d.Allowed || d.Limit != "tenant" || d.RetryAfter < 50*time.Second || d.RetryAfter > time.Minute {
		t.Errorf("batch over its share: %+v, want refused by tenant with a Retry-After just under 1m", d)
	}
	st := reps[2].b.Status(ctx)
	if st.Backend != "redis" || len(st.Limits) != 1 || len(st.Limits[0].Windows) != 1 {
		t.Fatalf("status %+v", st)
	}
	w := st.Limits[0].Windows[0]
	if w.Used != 20 || w.Remaining != 0 || w.Callers["intake"].Used != int(intake.Load()) || w.Callers["intake"].Reserved != 5 ||
		w.Callers["batch"].Used != int(batch.Load()) || w.Pool != 15 || w.PoolUsed != 15 {
		t.Errorf("window %+v", w)
	}
	if got := testutil.ToFloat64(reps[0].met.BudgetUsedRatio.WithLabelValues("tenant", "")); got < 0.9 {
		t.Errorf("used ratio %v", got)
	}
}

// TestRedisBudgetSlidesAndCaps: on Redis's clock the window slides (the
// first requests leave after per, not at a boundary) and a cap holds.
func TestRedisBudgetSlidesAndCaps(t *testing.T) {
	r := redistest.Start(t)
	bud := budgetOf([]config.BudgetLimit{{Name: "per-route", Scope: "route", Requests: 10, Per: 2 * time.Second}},
		map[string]config.Share{"batch": {Cap: ptr(0.5)}})
	rep := replicas(t, r.Addr, 1, bud, 1)[0]
	ctx := context.Background()
	admitted := 0
	var last limit.BudgetDecision
	begun := time.Now() // before the first admission, on any clock
	var asked time.Time
	for range 8 {
		asked = time.Now()
		if last = rep.b.Admit(ctx, "batch", "faxes.send", nil); last.Allowed {
			admitted++
		}
	}
	if admitted != 5 || last.Allowed || last.RetryAfter > 2*time.Second || last.RetryAfter < time.Second {
		t.Fatalf("batch capped at 5: %d admitted, last %+v", admitted, last)
	}
	// An unmatched path counts in no route window.
	if !rep.b.Admit(ctx, "batch", "unmatched", nil).Allowed {
		t.Error("unmatched refused by a route limit")
	}
	// Wait for batch's first request to leave the window, as the window's
	// read-only view shows it (Status trims on Redis's clock and counts
	// nothing), then ask once.
	eventually.Eventually(t, 10*time.Second, "batch's first request to leave the window", func() bool {
		return batchMayPass(t, rep.b.Status(ctx), "faxes.send")
	})
	// It left per after it was admitted, not at a boundary, and no sooner
	// than the Retry-After said. (Lower bounds only: a slow machine sees
	// the event late, never early; 10 ms for Redis's clock and ours.)
	const clocks = 10 * time.Millisecond
	if waited := time.Since(begun); waited < 2*time.Second-clocks {
		t.Errorf("the first request left the window %v after it was admitted, want the window's 2s", waited)
	}
	if waited := time.Since(asked); waited < last.RetryAfter-clocks {
		t.Errorf("the window had room %v after a Retry-After of %v", waited, last.RetryAfter)
	}
	if d := rep.b.Admit(ctx, "batch", "faxes.send", nil); !d.Allowed {
		t.Errorf("refused once the window had room: %+v", d)
	}
}

// batchMayPass reports whether st, read from Redis, shows room for batch in
// route's window (a window without entries is not listed).
func batchMayPass(t *testing.T, st limit.BudgetStatus, route string) bool {
	t.Helper()
	if st.Backend != "redis" {
		t.Fatalf("status from %q, want redis", st.Backend)
	}
	for _, l := range st.Limits {
		for _, w := range l.Windows {
			if w.Route == route {
				return w.Callers["batch"].Remaining > 0
			}
		}
	}
	return true
}

// TestRedisBudgetFallsBackAndRecovers: with Redis down each replica decides
// at requests / replicas_hint, counts the fallback, and no request that
// budget admits fails; when Redis is back, decisions are shared again.
func TestRedisBudgetFallsBackAndRecovers(t *testing.T) {
	r := redistest.Start(t)
	bud := budgetOf([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 30, Per: time.Minute}}, nil)
	// The replicas' own clock runs the fallback's cooldown; it stands
	// still until the test moves it.
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reps := replicasAt(t, r.Addr, 3, bud, 3, clk.Now)
	ctx := context.Background()
	r.Kill()
	admitted := 0
	for _, rep := range reps {
		for range 15 {
			if rep.b.Admit(ctx, "intake", "contacts.list", nil).Allowed {
				admitted++
			}
		}
	}
	if admitted != 30 {
		t.Errorf("during the outage the fleet admitted %d, want 3 x 30/3", admitted)
	}
	var fallbacks float64
	for _, rep := range reps {
		fallbacks += testutil.ToFloat64(rep.met.BudgetFallback)
	}
	if fallbacks != 45 {
		t.Errorf("fallbacks %v, want every one of the 45 decisions", fallbacks)
	}
	if st := reps[0].b.Status(ctx); st.Backend != "local" {
		t.Errorf("status during the outage says %q", st.Backend)
	}
	r.Restart(t)
	// Redis answers again (Status asks it directly and counts nothing);
	// within the cooldown the replica still decides alone ...
	eventually.Eventually(t, 10*time.Second, "Redis answering again", func() bool { return reps[0].b.Status(ctx).Backend == "redis" })
	before := testutil.ToFloat64(reps[0].met.BudgetFallback)
	reps[0].b.Admit(ctx, "intake", "contacts.list", nil)
	if got := testutil.ToFloat64(reps[0].met.BudgetFallback); got != before+1 {
		t.Errorf("a decision within the cooldown: fallbacks %v, want %v (decided alone)", got, before+1)
	}
	// ... and once the cooldown is over, its next decision is Redis's.
	clk.Advance(time.Minute)
	before = testutil.ToFloat64(reps[0].met.BudgetFallback)
	reps[0].b.Admit(ctx, "intake", "contacts.list", nil)
	if got := testutil.ToFloat64(reps[0].met.BudgetFallback); got != before {
		t.Fatalf("the first decision after the cooldown fell back (fallbacks %v, want %v): never returned to Redis", got, before)
	}
	if st := reps[0].b.Status(ctx); st.Backend != "redis" || st.Limits[0].Windows[0].Used < 1 {
		t.Errorf("after recovery: %+v", st)
	}
}

// TestRedisHoldsReachTheFleet: a hold set on one replica reaches the
// others through pub/sub, and a replica started later learns it from the
// shared table; with Redis down a replica still holds on its own. The
// periodic poll is put off for an hour, so only pub/sub and the table read
// at start can carry the hold here.
func TestRedisHoldsReachTheFleet(t *testing.T) {
	r := redistest.Start(t)
	rc := r.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newHolds := func() *limit.Holds {
		h := limit.NewHolds(limit.HoldOptions{Client: redisClient(t, r.Addr), KeyPrefix: "faxgate:", PollEvery: time.Hour})
		go h.Run(ctx)
		return h
	}
	var hs []*limit.Holds
	for range 3 {
		hs = append(hs, newHolds())
	}
	eventually.EventuallyErr(t, 5*time.Second, "the replicas subscribed", func() error {
		n, err := rc.PubSubNumSub(ctx, "faxgate:holds").Result()
		if err == nil && n["faxgate:holds"] != 3 {
			err = fmt.Errorf("%d subscribers", n["faxgate:holds"])
		}
		return err
	})
	const hold = time.Minute
	hs[0].Hold("contacts.list", hold)
	for i, h := range hs[1:] {
		var left time.Duration
		eventually.Eventually(t, 5*time.Second, fmt.Sprintf("replica %d holding", i+1), func() bool {
			var ok bool
			left, ok = h.Held("contacts.list")
			return ok
		})
		// The hold travels as time left: about the whole minute (10 s
		// for a slow delivery).
		if left > hold || left < hold-10*time.Second {
			t.Errorf("replica %d holds for %v, want about %v", i+1, left, hold)
		}
	}
	if _, ok := hs[1].Held("faxes.send"); ok {
		t.Error("another route is held")
	}
	late := newHolds()
	eventually.Eventually(t, 5*time.Second, "a late replica to learn the hold", func() bool { _, ok := late.Held("contacts.list"); return ok })
	var seen []string
	late.Each(func(route string, left float64) {
		if left > 0 {
			seen = append(seen, route)
		}
	})
	if len(seen) != 1 || seen[0] != "contacts.list" {
		t.Errorf("hold seconds reported for %v", seen)
	}

	r.Kill()
	hs[2].Hold("faxes.send", 2*time.Second)
	if _, ok := hs[2].Held("faxes.send"); !ok {
		t.Error("with Redis down the replica that saw the 429 does not hold")
	}
}

func ptr[T any](v T) *T { return &v }

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", time.Second},
		{"7", 7 * time.Second},
		{" 7 ", 7 * time.Second},
		{"0", time.Second},
		{"-3", time.Second},
		{"soon", time.Second},
		{"86400", 10 * time.Minute},
		{"99999999999999999999", time.Second}, // unreadable: overflow
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), time.Second},
		{now.Add(time.Hour).Format(http.TimeFormat), 10 * time.Minute},
	} {
		if got := limit.RetryAfter(tc.header, now, 10*time.Minute); got != tc.want {
			t.Errorf("Retry-After %q: hold %v, want %v", tc.header, got, tc.want)
		}
	}
}

// BenchmarkRedisBudget is one shared decision over two limits: one round
// trip to a local Redis (redis-cmds/op 1). When no limit applies to the
// request (here a route-scope limit and an unmatched path) the decision
// costs no round trip (redis-cmds/op 0); with no limits at all
// Rules.Budget is nil and a request pays nothing. BenchmarkLocalBudget
// (package policy) is the local decision.
func BenchmarkRedisBudget(b *testing.B) {
	r := redistest.Start(b)
	for _, tc := range []struct {
		name, route string
		limits      []config.BudgetLimit
	}{
		{"two_limits", "contacts.list", []config.BudgetLimit{
			{Name: "per-route", Scope: "route", Requests: 1 << 30, Per: 5 * time.Minute},
			{Name: "tenant", Scope: "tenant", Requests: 1 << 30, Per: 24 * time.Hour},
		}},
		{"no_limit_applies", "unmatched", []config.BudgetLimit{
			{Name: "per-route", Scope: "route", Requests: 1 << 30, Per: 5 * time.Minute},
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rep := replicas(b, r.Addr, 1, budgetOf(tc.limits, map[string]config.Share{"intake": {Reserve: 0.4}}), 1)[0]
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				rep.b.Admit(ctx, "intake", tc.route, nil)
			}
			b.ReportMetric(float64(rep.cmds.n.Load())/float64(b.N), "redis-cmds/op")
		})
	}
}

// TestRedisBudgetReserveOnly: a request told to use its reserve only (others
// queue for the pool: limit.PoolKey) is admitted within its reserve and
// refused beyond it even while the pool has room, on Redis as locally.
func TestRedisBudgetReserveOnly(t *testing.T) {
	r := redistest.Start(t)
	bud := budgetOf([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 8, Per: time.Minute}},
		map[string]config.Share{"batch": {Reserve: 0.25}})
	rep := replicas(t, r.Addr, 1, bud, 1)[0]
	local := limit.NewBudget(limit.BudgetConfig{Budget: bud, ReplicasHint: 1}, time.Now, limit.Deps{}, nil)
	ctx := context.Background()
	closed := []string{limit.PoolKey("tenant", "")}
	for name, b := range map[string]limit.Budget{"redis": rep.b, "local": local} {
		for i := range 2 {
			if d := b.Admit(ctx, "batch", "contacts.list", closed); !d.Allowed {
				t.Fatalf("%s: batch's request %d within its reserve of 2: %+v, want admitted", name, i+1, d)
			}
		}
		d := b.Admit(ctx, "batch", "contacts.list", closed)
		if d.Allowed || d.Limit != "tenant" || d.WaitKey("batch") != closed[0] {
			t.Fatalf("%s: batch beyond its reserve with the pool closed to it: %+v, want refused into the pool's queue", name, d)
		}
		if d := b.Admit(ctx, "batch", "contacts.list", nil); !d.Allowed {
			t.Fatalf("%s: batch with the pool open: %+v, want admitted from the pool's 6", name, d)
		}
	}
}
