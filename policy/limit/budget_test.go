package limit

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/config"
)

func ptr[T any](v T) *T { return &v }

// budgetConfig is a config with the given limits and shares, callers
// intake, billing and batch.
func budgetConfig(limits []config.BudgetLimit, shares map[string]config.Share) *config.Config {
	c := config.Default()
	c.Callers.List = []config.Caller{{Name: "intake"}, {Name: "billing"}, {Name: "batch"}}
	c.UpstreamBudget.Limits = limits
	c.UpstreamBudget.Shares = shares
	return &c
}

type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time          { return f.t }
func (f *fakeNow) advance(d time.Duration) { f.t = f.t.Add(d) }

func localBudget(t *testing.T, cfg *config.Config, clk *fakeNow) (*LocalBudget, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	b, ok := NewBudget(budgetCfg(cfg), clk.now, Deps{Metrics: m}, nil).(*LocalBudget)
	if !ok {
		t.Fatal("NewBudget did not build a local budget")
	}
	return b, m
}

func admitN(b Budget, caller, route string, n int) (admitted int, last BudgetDecision) {
	for range n {
		last = b.Admit(context.Background(), caller, route, nil)
		if last.Allowed {
			admitted++
		}
	}
	return admitted, last
}

// TestBudgetReserveIsKeptAndTheRestIsWorkConserving is docs/upstream-budget.md's worked
// example: 10 per minute, intake reserves 0.4. batch alone gets the 6
// unreserved; intake still gets its 4; neither gets more.
func TestBudgetReserveIsKeptAndTheRestIsWorkConserving(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	b, m := localBudget(t, budgetConfig([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 10, Per: time.Minute}},
		map[string]config.Share{"intake": {Reserve: 0.4}}), clk)

	got, last := admitN(b, "batch", "contacts.list", 10)
	if got != 6 || last.Allowed || last.Limit != "tenant" {
		t.Fatalf("batch alone: admitted %d (want the 6 unreserved), last %+v", got, last)
	}
	if last.RetryAfter != time.Minute {
		t.Errorf("batch's Retry-After = %v, want 1m (its first request leaves the window then)", last.RetryAfter)
	}
	clk.advance(10 * time.Second)
	if got, _ := admitN(b, "intake", "contacts.list", 6); got != 4 {
		t.Errorf("intake after batch took the pool: admitted %d, want its reserve of 4", got)
	}
	if got, _ := admitN(b, "billing", "contacts.list", 1); got != 0 {
		t.Errorf("billing got %d with the pool used up", got)
	}
	// The honest Retry-After: wait exactly that long and batch is admitted.
	_, d := admitN(b, "batch", "contacts.list", 1)
	if d.Allowed || d.RetryAfter != 50*time.Second {
		t.Fatalf("batch after 10s: %+v, want Retry-After 50s", d)
	}
	clk.advance(d.RetryAfter - time.Millisecond)
	if _, d := admitN(b, "batch", "contacts.list", 1); d.Allowed {
		t.Error("admitted before its Retry-After")
	}
	clk.advance(time.Millisecond)
	if _, d := admitN(b, "batch", "contacts.list", 1); !d.Allowed {
		t.Errorf("refused after waiting its Retry-After: %+v", d)
	}
	// batch's first 6 left the window; intake's 4 and batch's new one remain.
	if got := testutil.ToFloat64(m.BudgetUsedRatio.WithLabelValues("tenant", "")); got != 0.5 {
		t.Errorf("used ratio = %v, want 0.5", got)
	}
}

// TestBudgetIdleReserveIsNotLent: a reserve is kept for its caller even
// while it is idle.
func TestBudgetIdleReserveIsNotLent(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	b, _ := localBudget(t, budgetConfig([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 20, Per: 10 * time.Second}},
		map[string]config.Share{"intake": {Reserve: 0.5}, "billing": {Reserve: 0.25}}), clk)
	if got, _ := admitN(b, "batch", "x", 30); got != 5 {
		t.Errorf("batch got %d, want the unreserved 5", got)
	}
	if got, _ := admitN(b, "billing", "x", 30); got != 5 {
		t.Errorf("billing got %d, want its reserve of 5 (the pool is used up)", got)
	}
	if got, _ := admitN(b, "intake", "x", 30); got != 10 {
		t.Errorf("intake got %d, want its reserve of 10", got)
	}
}

// TestBudgetCap: a cap is a ceiling even with budget to spare, and its
// Retry-After is the caller's own oldest request leaving the window.
func TestBudgetCap(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	b, _ := localBudget(t, budgetConfig([]config.BudgetLimit{{Name: "per-route", Scope: "route", Requests: 10, Per: time.Minute}},
		map[string]config.Share{"batch": {Reserve: 0.1, Cap: ptr(0.3)}}), clk)
	admitN(b, "batch", "contacts.list", 1)
	clk.advance(5 * time.Second)
	got, d := admitN(b, "batch", "contacts.list", 5)
	if got != 2 || d.Allowed || d.Limit != "per-route" || d.RetryAfter != 55*time.Second {
		t.Errorf("batch capped at 3: admitted %d more (want 2), last %+v (want Retry-After 55s)", got, d)
	}
	if got, _ := admitN(b, "intake", "contacts.list", 10); got != 7 {
		t.Errorf("intake got %d, want the 7 left", got)
	}
	// Another route has its own window.
	if got, _ := admitN(b, "batch", "faxes.send", 5); got != 3 {
		t.Errorf("batch on another route got %d, want 3", got)
	}
}

// TestBudgetWindowsTogether: a request counts in every limit that covers it
// and only when all admit it; unmatched paths count in tenant limits only.
func TestBudgetWindowsTogether(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	b, _ := localBudget(t, budgetConfig([]config.BudgetLimit{
		{Name: "per-route", Scope: "route", Requests: 3, Per: time.Minute},
		{Name: "tenant", Scope: "tenant", Requests: 5, Per: time.Hour},
	}, nil), clk)
	if got, d := admitN(b, "intake", "contacts.list", 4); got != 3 || d.Limit != "per-route" {
		t.Errorf("route limit: %d, %+v", got, d)
	}
	if got, d := admitN(b, "intake", "unmatched", 4); got != 2 || d.Limit != "tenant" || d.RetryAfter != time.Hour {
		t.Errorf("unmatched paths count in the tenant only: %d, %+v", got, d)
	}
	clk.advance(time.Minute)
	// contacts.list has room again, the tenant does not: nothing counts.
	if _, d := admitN(b, "intake", "contacts.list", 1); d.Allowed || d.Limit != "tenant" || d.RetryAfter != time.Hour-time.Minute {
		t.Errorf("%+v", d)
	}
	st := b.Status(context.Background())
	if st.Backend != "local" || len(st.Limits) != 2 {
		t.Fatalf("status %+v", st)
	}
	route := st.Limits[0]
	if len(route.Windows) != 0 {
		t.Errorf("the route window emptied a minute on: %+v", route.Windows)
	}
	tenant := st.Limits[1].Windows
	if len(tenant) != 1 || tenant[0].Used != 5 || tenant[0].Remaining != 0 || tenant[0].Callers["intake"].Used != 5 {
		t.Errorf("tenant window %+v", tenant)
	}
}

// TestBudgetNoBoundaryBurst: however requests arrive, no window of length
// per ever holds more than N admitted requests (a fixed window would let 2N
// through around its boundary).
func TestBudgetNoBoundaryBurst(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	const n, per = 20, 10 * time.Second
	b, _ := localBudget(t, budgetConfig([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: n, Per: per}},
		map[string]config.Share{"intake": {Reserve: 0.3}, "batch": {Cap: ptr(0.5)}}), clk)
	rng := rand.New(rand.NewPCG(1, 2))
	var admitted []time.Time
	callers := []string{"intake", "billing", "batch"}
	// A quiet start, then a burst straddling t = per, then random traffic.
	clk.advance(per - time.Second)
	for range 100 {
		if b.Admit(context.Background(), callers[rng.IntN(3)], "x", nil).Allowed {
			admitted = append(admitted, clk.now())
		}
	}
	clk.advance(time.Second + time.Millisecond)
	for range 5000 {
		clk.advance(time.Duration(rng.IntN(40)) * time.Millisecond)
		if b.Admit(context.Background(), callers[rng.IntN(3)], "x", nil).Allowed {
			admitted = append(admitted, clk.now())
		}
	}
	for i := range admitted {
		j := i
		for j < len(admitted) && admitted[j].Sub(admitted[i]) < per {
			j++
		}
		if j-i > n {
			t.Fatalf("%d requests admitted within %v of %v, limit %d", j-i, per, admitted[i], n)
		}
	}
	if len(admitted) < 5*n {
		t.Errorf("only %d admitted over %v: the window does not slide", len(admitted), clk.now().Sub(admitted[0]))
	}
}

// TestBudgetReplicasHintAndReload: locally a limit is requests /
// replicas_hint; a reload keeps the windows of limits that keep their name.
func TestBudgetReplicasHintAndReload(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	cfg := budgetConfig([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 30, Per: time.Minute}}, nil)
	cfg.RateLimit.ReplicasHint = 3
	b, _ := localBudget(t, cfg, clk)
	if got, _ := admitN(b, "intake", "x", 20); got != 10 {
		t.Errorf("admitted %d, want 30 / 3", got)
	}
	cfg2 := budgetConfig([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 45, Per: time.Minute}}, nil)
	cfg2.RateLimit.ReplicasHint = 3
	b2 := NewBudget(budgetCfg(cfg2), clk.now, Deps{}, b)
	if got, _ := admitN(b2, "intake", "x", 20); got != 5 {
		t.Errorf("after the reload admitted %d, want 15 - 10 already used", got)
	}
	if NewBudget(budgetCfg(budgetConfig(nil, nil)), clk.now, Deps{}, nil) != nil {
		t.Error("a budget without limits is not nil: every request would pay for it")
	}
}

// BenchmarkLocalBudget is one local decision over two limits.
func BenchmarkLocalBudget(b *testing.B) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	cfg := budgetConfig([]config.BudgetLimit{
		{Name: "per-route", Scope: "route", Requests: 2500, Per: 5 * time.Minute},
		{Name: "tenant", Scope: "tenant", Requests: 100000, Per: 24 * time.Hour},
	}, map[string]config.Share{"intake": {Reserve: 0.4}})
	bud := NewBudget(budgetCfg(cfg), clk.now, Deps{}, nil)
	b.ReportAllocs()
	for b.Loop() {
		clk.advance(200 * time.Millisecond)
		bud.Admit(context.Background(), "intake", "contacts.list", nil)
	}
}

// TestBudgetReloadSharesTheLock: requests still deciding by the rules before
// a reload and requests deciding by the new ones use the same windows under
// the same lock (run with -race), and together never pass the limit.
func TestBudgetReloadSharesTheLock(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	cfg := budgetConfig([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 100, Per: time.Hour}}, nil)
	old := NewBudget(budgetCfg(cfg), clk.now, Deps{}, nil)
	cur := NewBudget(budgetCfg(cfg), clk.now, Deps{}, old)
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for _, b := range []Budget{old, cur, old, cur} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _ := admitN(b, "intake", "x", 50)
			admitted.Add(int64(n))
		}()
	}
	wg.Wait()
	if admitted.Load() != 100 {
		t.Errorf("old and new rules together admitted %d, want the limit of 100", admitted.Load())
	}
}

// TestFloorShare: floor(fraction x requests) as the decimals say, not as
// binary floating point rounds them.
func TestFloorShare(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		n    int
		want int
	}{{0.57, 2500, 1425}, {0.29, 100, 29}, {0.1, 3, 0}, {0.4, 10, 4}, {1, 7, 7}, {0.3333, 3, 0}} {
		if got := floorShare(tc.f, tc.n); got != tc.want {
			t.Errorf("floor(%v x %d) = %d, want %d", tc.f, tc.n, got, tc.want)
		}
	}
}

// budgetCfg is what the assembler hands NewBudget for c.
func budgetCfg(c *config.Config) BudgetConfig {
	return BudgetConfig{Budget: c.UpstreamBudget, Shared: c.RateLimit.Backend == "redis",
		ReplicasHint: c.RateLimit.ReplicasHint, KeyPrefix: c.Redis.KeyPrefix}
}

// rateCfg is what the assembler hands NewRateLimiter for c.
func rateCfg(c *config.Config) RateConfig {
	return RateConfig{RateLimit: c.RateLimit, Callers: c.Callers.List, KeyPrefix: c.Redis.KeyPrefix}
}
