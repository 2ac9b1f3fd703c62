package limit

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// waitRig is a local budget, the holds and a waitlist on one fake clock,
// with the proxy's decision order (the hold, then the budget) and a count
// of the decisions asked.
type waitRig struct {
	t       *testing.T
	clk     *clocktest.Fake
	budget  *LocalBudget
	holds   *Holds
	list    *Waitlist
	gauge   prometheus.Gauge
	asked   atomic.Int64
	mu      sync.Mutex
	order   []string // the callers asked, in order
	passed  []string // the requests admitted, in order
	maxWait time.Duration
	maxN    int
}

func newWaitRig(t *testing.T, limits []config.BudgetLimit, shares map[string]config.Share) *waitRig {
	t.Helper()
	clk := clocktest.New(time.Unix(1_000_000, 0))
	cfg := budgetConfig(limits, shares)
	b, ok := NewBudget(budgetCfg(cfg), clk.Now, Deps{Metrics: NewMetrics(prometheus.NewRegistry())}, nil).(*LocalBudget)
	if !ok {
		t.Fatal("NewBudget did not build a local budget")
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"})
	return &waitRig{t: t, clk: clk, budget: b, holds: NewHolds(HoldOptions{Now: clk.Now}), gauge: g,
		list: NewWaitlist(WaitlistOptions{Clock: clk, Waiting: g}), maxWait: 30 * time.Second, maxN: 1000}
}

func (r *waitRig) decide(who, caller, route string) Decide {
	return func(ctx context.Context, reserveOnly []string) Outcome {
		r.asked.Add(1)
		r.mu.Lock()
		r.order = append(r.order, caller+"@"+route)
		r.mu.Unlock()
		if left, held := r.holds.Held(route); held {
			return Outcome{Key: HoldKey(route), RetryAfter: left, Throttled: true}
		}
		d := r.budget.Admit(ctx, caller, route, reserveOnly)
		if d.Allowed {
			r.mu.Lock()
			r.passed = append(r.passed, who)
			r.mu.Unlock()
			return Outcome{Allowed: true}
		}
		return Outcome{Key: d.WaitKey(caller), RetryAfter: d.RetryAfter, Limit: d.Limit}
	}
}

type waitResult struct {
	who    string
	out    Outcome
	waited time.Duration
}

// admit runs one request's admission in its own goroutine and reports it
// on done.
func (r *waitRig) admit(ctx context.Context, who, caller, route string, done chan<- waitResult) {
	keys, reserved, first := WaitKeys(r.budget, caller, route, true)
	req := WaitRequest{Caller: caller, MaxWait: r.maxWait, MaxWaiting: r.maxN, Keys: keys, Reserved: reserved, First: first}
	go func() {
		out, waited := r.list.Admit(ctx, req, r.decide(who, caller, route))
		done <- waitResult{who, out, waited}
	}()
}

// queued starts a request and returns once it waits.
func (r *waitRig) queued(ctx context.Context, who, caller, route string, done chan<- waitResult) {
	r.t.Helper()
	before := r.list.Waiters().Total
	r.admit(ctx, who, caller, route, done)
	r.until(func() bool { return r.list.Waiters().Total == before+1 }, who+" waiting")
}

func (r *waitRig) until(cond func() bool, what string) {
	r.t.Helper()
	eventually.Eventually(r.t, 5*time.Second, what, cond)
}

// settled waits until the waiters have gone back to sleep: n waiting and
// the head's one timer pending (or none when n is 0).
func (r *waitRig) settled(n int) {
	r.t.Helper()
	r.until(func() bool {
		want := 0
		if n > 0 {
			want = 1
		}
		return r.list.Waiters().Total == n && r.clk.Pending() == want
	}, "the waitlist to settle")
}

// admitted is the requests admitted so far, in the order the budget
// admitted them.
func (r *waitRig) admitted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.passed...)
}

func recv(t *testing.T, done <-chan waitResult) waitResult {
	t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("no answer within 5 s")
		return waitResult{}
	}
}

// noAnswer holds that nobody is answered while the fake clock stands still
// (a waiter wakes only on a timer or a signal; a short watch catches one
// that would answer anyway).
func noAnswer(t *testing.T, done chan waitResult) {
	t.Helper()
	var early waitResult
	eventually.Never(t, 20*time.Millisecond, "an early answer", func() bool {
		select {
		case early = <-done:
			t.Logf("%s answered early: %+v", early.who, early.out)
			return true
		default:
			return false
		}
	})
}

var tenant2 = []config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 2, Per: 10 * time.Second}}

// TestWaitFIFOWakesAtAdmissionTimeWithoutPolling: three requests wait for
// a full window; one timer is pending (the head's), nothing is asked until
// the window frees, then they are admitted oldest first, each when a slot
// frees, and the one that does not fit asks again only at its own time.
func TestWaitFIFOWakesAtAdmissionTimeWithoutPolling(t *testing.T) {
	r := newWaitRig(t, tenant2, nil)
	if n, _ := admitN(r.budget, "batch", "contacts.list", 2); n != 2 {
		t.Fatalf("admitted %d of 2", n)
	}
	done := make(chan waitResult, 3)
	ctx := context.Background()
	r.queued(ctx, "A", "batch", "contacts.list", done)
	r.queued(ctx, "B", "billing", "contacts.list", done)
	r.queued(ctx, "C", "batch", "contacts.list", done)
	r.settled(3)
	if got := r.asked.Load(); got != 1 {
		t.Errorf("asked %d times to queue three, want 1 (B and C join behind A unasked)", got)
	}
	if at, _ := r.clk.NextDeadline(); !at.Equal(time.Unix(1_000_010, 0)) {
		t.Errorf("the head sleeps until %v, want the window's first slot at 10 s", at)
	}
	if got := testutil.ToFloat64(r.gauge); got != 3 {
		t.Errorf("waiting gauge %v, want 3", got)
	}
	// No polling: 9 s pass with nothing asked.
	r.clk.Advance(9 * time.Second)
	noAnswer(t, done)
	if got := r.asked.Load(); got != 1 {
		t.Errorf("asked %d times before the window freed, want 1", got)
	}
	r.clk.Advance(time.Second)
	if a, b := recv(t, done), recv(t, done); !a.out.Allowed || !b.out.Allowed {
		t.Fatalf("at 10 s: %+v and %+v, want both admitted", a, b)
	}
	if got := fmt.Sprint(r.admitted()); got != "[A B]" {
		t.Fatalf("admitted %s at 10 s, want [A B]", got)
	}
	r.settled(1)
	// C asked once at 10 s (refused: A and B took the two slots) and sleeps
	// until A's entry leaves at 20 s.
	if got := r.asked.Load(); got != 4 {
		t.Errorf("asked %d times, want 4 (A at arrival, then A, B, C once each)", got)
	}
	if at, _ := r.clk.NextDeadline(); !at.Equal(time.Unix(1_000_020, 0)) {
		t.Errorf("C sleeps until %v, want 20 s", at)
	}
	r.clk.Advance(10 * time.Second)
	c := recv(t, done)
	if c.who != "C" || !c.out.Allowed || c.waited != 20*time.Second {
		t.Errorf("C: %+v, want admitted after 20 s", c)
	}
	r.settled(0)
	if got := testutil.ToFloat64(r.gauge); got != 0 {
		t.Errorf("waiting gauge %v after all left, want 0", got)
	}
}

// TestWaitReserveFirst: a caller within its reserve is admitted at once
// past the pool's queue; in a hold's queue, callers with a reserve go
// first.
func TestWaitReserveFirst(t *testing.T) {
	r := newWaitRig(t, []config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 4, Per: 10 * time.Second}},
		map[string]config.Share{"intake": {Reserve: 0.25}})
	if n, _ := admitN(r.budget, "batch", "contacts.list", 3); n != 3 {
		t.Fatalf("batch admitted %d of the 3 unreserved", n)
	}
	done := make(chan waitResult, 4)
	ctx := context.Background()
	r.queued(ctx, "batch-1", "batch", "contacts.list", done)
	r.admit(ctx, "intake-1", "intake", "contacts.list", done)
	if res := recv(t, done); res.who != "intake-1" || !res.out.Allowed || res.waited != 0 {
		t.Fatalf("intake within its reserve: %+v, want admitted at once, past batch's queue", res)
	}
	r.settled(1)

}

// TestWaitHoldReserveFirst: in a hold's queue a caller with a reserve goes
// ahead of callers without one, whatever the arrival order.
func TestWaitHoldReserveFirst(t *testing.T) {
	r := newWaitRig(t, []config.BudgetLimit{{Name: "per-route", Scope: "route", Requests: 4, Per: 10 * time.Second}},
		map[string]config.Share{"intake": {Reserve: 0.25}})
	done := make(chan waitResult, 2)
	ctx := context.Background()
	r.holds.Hold("contacts.details", 5*time.Second)
	r.queued(ctx, "batch", "batch", "contacts.details", done)
	r.queued(ctx, "intake", "intake", "contacts.details", done)
	if st := r.list.Waiters(); st.Total != 2 || st.Callers["batch"] != 1 || st.Callers["intake"] != 1 ||
		len(st.Queues) != 1 || st.Queues[0].Kind != "hold" || st.Queues[0].Route != "contacts.details" {
		t.Errorf("waiters %+v, want batch and intake in the hold's queue", st)
	}
	r.settled(2)
	r.clk.Advance(5 * time.Second)
	for range 2 {
		if res := recv(t, done); !res.out.Allowed || res.waited != 5*time.Second {
			t.Errorf("after the hold: %+v, want admitted after 5 s", res)
		}
	}
	if got := fmt.Sprint(r.admitted()); got != "[intake batch]" {
		t.Errorf("admitted %s, want [intake batch]: a reserve goes first", got)
	}
}

// TestWaitDepartureFreesTheSlot: the head goes away; it is removed at once,
// counted nowhere, and the next waiter takes its turn at the same time.
func TestWaitDepartureFreesTheSlot(t *testing.T) {
	r := newWaitRig(t, tenant2, nil)
	admitN(r.budget, "batch", "contacts.list", 2)
	done := make(chan waitResult, 2)
	ctx, cancel := context.WithCancel(context.Background())
	r.queued(ctx, "A", "batch", "contacts.list", done)
	r.queued(context.Background(), "B", "billing", "contacts.list", done)
	r.settled(2)
	cancel()
	if a := recv(t, done); a.who != "A" || a.out.Allowed {
		t.Fatalf("A after leaving: %+v", a)
	}
	r.settled(1)
	if at, _ := r.clk.NextDeadline(); !at.Equal(time.Unix(1_000_010, 0)) {
		t.Errorf("B sleeps until %v, want A's turn at 10 s", at)
	}
	r.clk.Advance(10 * time.Second)
	if b := recv(t, done); b.who != "B" || !b.out.Allowed {
		t.Fatalf("B: %+v, want admitted at 10 s", b)
	}
	st := r.budget.Status(context.Background())
	if cw := st.Limits[0].Windows[0].Callers; cw["batch"].Used != 0 || cw["billing"].Used != 1 {
		t.Errorf("window after 10 s: %+v, want only B counted (A left uncounted)", cw)
	}
}

// TestWaitRefusedAtOnceBeyondMaxWait: an admission time past max_wait is
// refused at once, with the honest Retry-After and no timer.
func TestWaitRefusedAtOnceBeyondMaxWait(t *testing.T) {
	r := newWaitRig(t, tenant2, nil)
	r.maxWait = 5 * time.Second
	admitN(r.budget, "batch", "contacts.list", 2)
	done := make(chan waitResult, 1)
	r.admit(context.Background(), "A", "batch", "contacts.list", done)
	a := recv(t, done)
	if a.out.Allowed || a.waited != 0 || a.out.RetryAfter != 10*time.Second || a.out.Limit != "tenant" {
		t.Errorf("beyond max_wait: %+v, want refused at once with 10 s", a)
	}
	if n := r.clk.Pending(); n != 0 {
		t.Errorf("%d timers pending after a refusal", n)
	}
	// A hold longer than max_wait: refused at once too, as throttled.
	r.holds.Hold("contacts.details", time.Minute)
	r.admit(context.Background(), "B", "batch", "contacts.details", done)
	if b := recv(t, done); b.out.Allowed || !b.out.Throttled || b.waited != 0 {
		t.Errorf("a hold beyond max_wait: %+v, want throttled at once", b)
	}
}

// TestWaitMaxWaitingBound: with max_waiting 2, a third request of the
// caller with the most waiters is refused at once.
func TestWaitMaxWaitingBound(t *testing.T) {
	r := newWaitRig(t, tenant2, nil)
	r.maxN = 2
	admitN(r.budget, "batch", "contacts.list", 2)
	done := make(chan waitResult, 3)
	r.queued(context.Background(), "A", "batch", "contacts.list", done)
	r.queued(context.Background(), "B", "billing", "contacts.list", done)
	r.admit(context.Background(), "C", "batch", "contacts.list", done)
	if c := recv(t, done); c.who != "C" || c.out.Allowed || c.waited != 0 || c.out.RetryAfter < 10*time.Second {
		t.Errorf("the third waiter: %+v, want refused at once", c)
	}
	if st := r.list.Waiters(); st.Total != 2 {
		t.Errorf("%d waiting, want 2", st.Total)
	}
	r.clk.Advance(10 * time.Second)
	recv(t, done)
	recv(t, done)
}

// TestWaitFairRoom is the regression of one caller's waiters shutting
// others out: a tenant limit of 4 per 8 s, batch capped at half of it and
// max_waiting 3. batch's three requests waiting on its own cap fill the
// room; a request of intake, within the pool's queue, then takes the place
// of batch's newest waiter, which gets its 429 at once. A further batch
// request is refused at once: batch has the most waiters.
func TestWaitFairRoom(t *testing.T) {
	r := newWaitRig(t, []config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 4, Per: 8 * time.Second}},
		map[string]config.Share{"batch": {Cap: ptr(0.5)}})
	r.maxN = 3
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "evicted"})
	r.list = NewWaitlist(WaitlistOptions{Clock: r.clk, Waiting: r.gauge, Evicted: evicted})
	if n, _ := admitN(r.budget, "batch", "contacts.list", 2); n != 2 {
		t.Fatalf("batch admitted %d, want its cap of 2", n)
	}
	if n, _ := admitN(r.budget, "intake", "contacts.list", 2); n != 2 {
		t.Fatalf("intake admitted %d, want the 2 left", n)
	}
	done := make(chan waitResult, 6)
	ctx := context.Background()
	for _, who := range []string{"batch-1", "batch-2", "batch-3"} {
		r.queued(ctx, who, "batch", "contacts.list", done)
	}
	r.admit(ctx, "intake-1", "intake", "contacts.list", done)
	if res := recv(t, done); res.who != "batch-3" || res.out.Allowed || res.waited != 0 {
		t.Fatalf("with the room full: %+v, want batch's newest (batch-3) answered at once", res)
	}
	r.until(func() bool { return r.list.Waiters().Callers["intake"] == 1 }, "intake-1 waiting in batch-3's place")
	if got := testutil.ToFloat64(evicted); got != 1 {
		t.Errorf("evictions counted %v, want 1", got)
	}
	r.admit(ctx, "batch-4", "batch", "contacts.list", done)
	if res := recv(t, done); res.who != "batch-4" || res.out.Allowed {
		t.Fatalf("batch-4: %+v, want refused at once: batch has the most waiters", res)
	}
	if st := r.list.Waiters(); st.Total != 3 || st.Callers["batch"] != 2 || st.Callers["intake"] != 1 {
		t.Errorf("waiters %+v, want batch-1, batch-2 and intake-1", st)
	}
	r.settled(3)
	r.clk.Advance(8*time.Second + time.Millisecond)
	for range 3 {
		if res := recv(t, done); !res.out.Allowed {
			t.Errorf("%s after the window: %+v, want admitted", res.who, res.out)
		}
	}
}

// TestWaitSpentReserveQueues is the regression of a spent reserve skipping
// the queue: batch, with a reserve it has used up, must queue behind intake
// for the pool, not take a pool slot ahead of it. A caller within its
// reserve still passes (TestWaitReserveFirst).
func TestWaitSpentReserveQueues(t *testing.T) {
	r := newWaitRig(t, []config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 8, Per: 8 * time.Second}},
		map[string]config.Share{"batch": {Reserve: 0.25}})
	r.list = NewWaitlist(WaitlistOptions{Clock: r.clk, Waiting: r.gauge, Guard: DefaultWaitGuard})
	if n, _ := admitN(r.budget, "intake", "contacts.list", 6); n != 6 {
		t.Fatalf("intake admitted %d, want the pool's 6", n)
	}
	r.clk.Advance(time.Second)
	if n, _ := admitN(r.budget, "batch", "contacts.list", 2); n != 2 {
		t.Fatalf("batch admitted %d, want its reserve of 2", n)
	}
	done := make(chan waitResult, 2)
	ctx := context.Background()
	r.queued(ctx, "intake-7", "intake", "contacts.list", done)
	r.settled(1)
	// The pool frees when intake's six leave, at 8 s; intake-7 asks 100 ms
	// later (the guard). batch comes in between, its reserve spent.
	r.clk.Advance(7*time.Second + time.Millisecond)
	r.admit(ctx, "batch-3", "batch", "contacts.list", done)
	r.until(func() bool { return r.list.Waiters().Total == 2 }, "batch-3 queued behind intake-7")
	noAnswer(t, done)
	r.clk.Advance(DefaultWaitGuard)
	// Both are admitted; the order they were admitted in is the budget's
	// (admitted), not the order their goroutines report on done.
	for range 2 {
		if res := recv(t, done); !res.out.Allowed {
			t.Fatalf("%s: %+v, want admitted", res.who, res)
		}
	}
	if got := fmt.Sprint(r.admitted()); got != "[intake-7 batch-3]" {
		t.Errorf("admitted %s, want intake-7 first: it queued first", got)
	}
}

// TestWaitHoldThenBudget: a hold's waiters, once it ends, are decided one
// after another; the one the window cannot take moves to the window's
// queue, and a waiter whose deadline falls before the next try is
// answered at once.
func TestWaitHoldThenBudget(t *testing.T) {
	r := newWaitRig(t, tenant2, nil)
	r.maxWait = 12 * time.Second
	r.holds.Hold("contacts.list", 2*time.Second)
	done := make(chan waitResult, 4)
	for _, who := range []string{"A", "B", "C"} {
		r.queued(context.Background(), who, "batch", "contacts.list", done)
	}
	r.settled(3)
	r.clk.Advance(2 * time.Second)
	if a, b := recv(t, done), recv(t, done); !a.out.Allowed || !b.out.Allowed {
		t.Fatalf("after the hold: %+v, %+v", a, b)
	}
	if got := fmt.Sprint(r.admitted()); got != "[A B]" {
		t.Fatalf("admitted %s after the hold, want [A B]", got)
	}
	// C: the window is full until 12 s (A's entry at 2 s), beyond its
	// deadline of 12 s from 0 s? 2 + 10 = 12: exactly at it, so it waits.
	r.settled(1)
	if st := r.list.Waiters(); len(st.Queues) != 1 || st.Queues[0].Kind != "pool" || st.Queues[0].Limit != "tenant" {
		t.Errorf("C waits in %+v, want the tenant pool", st.Queues)
	}
	r.clk.Advance(10 * time.Second)
	if c := recv(t, done); !c.out.Allowed || c.waited != 12*time.Second {
		t.Errorf("C: %+v, want admitted at 12 s", c)
	}
}

// TestWaitDrainAnswersEveryWaiter: Drain refuses at once whoever cannot be
// admitted before its deadline, and bounds the others.
func TestWaitDrainAnswersEveryWaiter(t *testing.T) {
	r := newWaitRig(t, tenant2, nil)
	admitN(r.budget, "batch", "contacts.list", 2)
	done := make(chan waitResult, 3)
	for _, who := range []string{"A", "B"} {
		r.queued(context.Background(), who, "batch", "contacts.list", done)
	}
	r.settled(2)
	r.list.Drain(r.clk.Now().Add(5 * time.Second))
	a, b := recv(t, done), recv(t, done)
	if a.out.Allowed || b.out.Allowed || a.waited != 0 || b.waited != 0 {
		t.Errorf("drain: %+v, %+v, want both refused at once (their turn is at 10 s)", a, b)
	}
	r.admit(context.Background(), "C", "batch", "contacts.list", done)
	if c := recv(t, done); c.out.Allowed || c.waited != 0 {
		t.Errorf("a request during the drain: %+v, want refused at once", c)
	}
	if st := r.list.Waiters(); st.Total != 0 {
		t.Errorf("%d still waiting", st.Total)
	}
}

// TestWaitThousandWaitersCostNoCPU: 1,000 requests wait on one replica:
// one timer is pending, nothing is asked while they wait, the process's
// goroutines are parked, and the state per waiter stays small.
func TestWaitThousandWaitersCostNoCPU(t *testing.T) {
	const n = 1000
	r := newWaitRig(t, []config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: n, Per: 10 * time.Second}}, nil)
	admitN(r.budget, "batch", "contacts.list", n)
	done := make(chan waitResult, n)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.admit(context.Background(), "w", []string{"batch", "billing"}[i%2], "contacts.list", done)
		}()
	}
	wg.Wait()
	r.until(func() bool { return r.list.Waiters().Total == n }, "1000 waiting")
	r.settled(n)
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	asked := r.asked.Load()
	eventually.Never(t, 200*time.Millisecond, "a waiter asking the budget while the clock stands still", func() bool {
		return r.asked.Load() != asked
	})
	if p := r.clk.Pending(); p != 1 {
		t.Errorf("%d timers pending, want 1 (the head's)", p)
	}
	perWaiter := (int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc)) / n
	t.Logf("heap per waiter, goroutine stacks excluded: %d bytes", perWaiter)
	if perWaiter > 2048 {
		t.Errorf("%d bytes of heap per waiter, want under 2 KiB", perWaiter)
	}
	r.clk.Advance(10 * time.Second)
	for range n {
		if res := recv(t, done); !res.out.Allowed {
			t.Fatalf("after the window: %+v", res)
		}
	}
}

// TestWaitGuard: with a guard, the head asks that long after its
// admission time, never after its deadline.
func TestWaitGuard(t *testing.T) {
	r := newWaitRig(t, tenant2, nil)
	r.list = NewWaitlist(WaitlistOptions{Clock: r.clk, Guard: DefaultWaitGuard})
	admitN(r.budget, "batch", "contacts.list", 2)
	done := make(chan waitResult, 2)
	r.queued(context.Background(), "A", "batch", "contacts.list", done)
	r.settled(1)
	if at, _ := r.clk.NextDeadline(); !at.Equal(time.Unix(1_000_010, 0).Add(DefaultWaitGuard)) {
		t.Errorf("the head sleeps until %v, want 10 s and the guard", at)
	}
	r.clk.Advance(10*time.Second + DefaultWaitGuard)
	if a := recv(t, done); !a.out.Allowed {
		t.Errorf("A: %+v", a)
	}
	// A deadline of exactly 10 s: the guard gives way to it.
	r.maxWait = 10 * time.Second
	admitN(r.budget, "batch", "contacts.list", 1)
	r.queued(context.Background(), "B", "batch", "contacts.list", done)
	r.settled(1)
	if at, _ := r.clk.NextDeadline(); !at.Equal(r.clk.Now().Add(10 * time.Second)) {
		t.Errorf("B sleeps until %v, want its deadline", at)
	}
	r.clk.Advance(10 * time.Second)
	if b := recv(t, done); !b.out.Allowed {
		t.Errorf("B: %+v", b)
	}
}
