package e2e_test

import (
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// Waiting instead of refusing (docs/upstream-budget.md#waiting-instead-of-refusing),
// against a real redis-server, three replicas and faxsim enforcing a
// scaled-down vendor limit.

// waitBudget is 90% of the vendor's 20 per 4 s (docs/upstream-budget.md
// advises a little under the vendor's figure: a sliding window on Redis's
// clock and the vendor's fixed window on its own never line up exactly).
const waitBudget = `
upstream_budget:
  max_wait: 8s
  limits:
    - { name: per-route, scope: route, requests: 18, per: 4s }
`

var vendor20 = faxsim.Window{Requests: 20, Per: 4 * time.Second}

// timedCall is call with how long the answer took.
type timedCall struct {
	answer
	took time.Duration
}

// burst sends n requests of batch at once, spread over the replicas.
func burst(t *testing.T, f *fleet, n int) []timedCall {
	t.Helper()
	out := make([]timedCall, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			a := call(t, f.gws[i%len(f.gws)], "batch")
			out[i] = timedCall{a, time.Since(start)}
		}()
	}
	wg.Wait()
	return out
}

// maxInVendorWindow is the most arrivals at the vendor on path within one of
// the vendor's own windows, as faxsim keeps them (faxsim.Window: a window
// of per opens with the first request after the last one closed).
func maxInVendorWindow(reqs []faxsim.Recorded, path string, per time.Duration) int {
	var at []time.Time
	for _, r := range reqs {
		if r.Path == path {
			at = append(at, r.Time)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	most, n := 0, 0
	var start time.Time
	for _, a := range at {
		if start.IsZero() || !a.Before(start.Add(per)) {
			start, n = a, 0
		}
		n++
		most = max(most, n)
	}
	return most
}

// maxInWindow is the most arrivals at the vendor on path within any
// interval of length per: the sliding view, stricter than the vendor's own
// fixed windows.
func maxInWindow(reqs []faxsim.Recorded, path string, per time.Duration) int {
	var at []time.Time
	for _, r := range reqs {
		if r.Path == path {
			at = append(at, r.Time)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	most := 0
	for i, j := 0, 0; j < len(at); j++ {
		for at[j].Sub(at[i]) >= per {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// waitHeld waits until every replica holds route: the hold of one
// replica's 429 reaches the fleet within a second (it takes milliseconds).
func (f *fleet) waitHeld(t *testing.T, route string) {
	t.Helper()
	eventually.Eventually(t, time.Second, "every replica holding "+route, func() bool {
		for _, g := range f.gws {
			if _, ok := g.Gateway.Holds.Held(route); !ok {
				return false
			}
		}
		return true
	})
}

// TestFleetBurstWaitsInsteadOfRefusing: a burst of 1.5 times the budget
// over three replicas is answered 200 throughout, the rest after waiting
// for the window's slots; the vendor never answers 429, and no interval of
// its window's length holds more than its limit.
func TestFleetBurstWaitsInsteadOfRefusing(t *testing.T) {
	r := redistest.Start(t)
	f := budgetFleet(t, r.Addr, vendor20, waitBudget)
	res := burst(t, f, 27)
	waited := 0
	for i, c := range res {
		if c.status != 200 {
			t.Errorf("request %d: %+v, want 200", i, c)
		}
		if c.took > 8*time.Second+time.Second {
			t.Errorf("request %d answered after %v, beyond max_wait", i, c.took)
		}
		if c.took > 2*time.Second {
			waited++
		}
	}
	if waited < 9 {
		t.Errorf("%d requests waited for the next window, want the 9 beyond the budget", waited)
	}
	if n := f.sim.Throttled(); n != 0 {
		t.Errorf("the vendor answered 429 %d times", n)
	}
	reqs := f.sim.Requests()
	if most := maxInVendorWindow(reqs, "/v1/contacts/list", vendor20.Per); most > vendor20.Requests {
		t.Errorf("%d requests reached the vendor in one of its %v windows, over its %d", most, vendor20.Per, vendor20.Requests)
	}
	// The budget's own promise, 18 in any 4 s on Redis's clock, seen at the
	// vendor with up to 200 ms of transit jitter (a loaded machine, -race).
	if most := maxInWindow(reqs, "/v1/contacts/list", vendor20.Per-200*time.Millisecond); most > 18 {
		t.Errorf("%d requests reached the vendor within %v, over the budget's 18", most, vendor20.Per-200*time.Millisecond)
	}
	var count uint64
	for _, g := range f.gws {
		count += histogramCount(t, g, "batch")
		if w := testutil.ToFloat64(g.Metrics.Limits.BudgetWaiting); w != 0 {
			t.Errorf("faxgate_upstream_budget_waiting %v after the burst", w)
		}
	}
	if count < 9 {
		t.Errorf("faxgate_upstream_budget_wait_seconds counted %d waits, want at least 9", count)
	}
}

func histogramCount(t *testing.T, g *gatewaytest.Gateway, caller string) uint64 {
	t.Helper()
	mfs, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "faxgate_upstream_budget_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "caller" && l.GetValue() == caller {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	t.Fatalf("no faxgate_upstream_budget_wait_seconds{caller=%q} series", caller)
	return 0
}

// TestFleetWaitsOutAVendorRetryAfter: the vendor answers one 429 with
// Retry-After: 2; it is relayed, and the requests behind it, on every
// replica, wait the hold out and are answered 200, none of them reaching
// the vendor before the 2 s passed.
func TestFleetWaitsOutAVendorRetryAfter(t *testing.T) {
	r := redistest.Start(t)
	f := budgetFleet(t, r.Addr, faxsim.Window{}, "upstream_budget:\n  max_wait: 5s\n")
	f.sim.ThrottleNext(1, 2*time.Second)
	first := call(t, f.gws[0], "batch")
	if first.status != 429 || first.code != "" || first.retryAfter != "2" {
		t.Fatalf("the vendor's 429 was not relayed unchanged: %+v", first)
	}
	reqs := f.sim.Requests()
	throttledAt := reqs[len(reqs)-1].Time
	f.waitHeld(t, "contacts.list")
	res := burst(t, f, 6)
	for i, c := range res {
		if c.status != 200 || c.took < time.Second {
			t.Errorf("request %d behind the hold: %+v, want 200 after waiting", i, c)
		}
	}
	for _, q := range f.sim.Requests() {
		if q.Time.After(throttledAt) && q.Time.Before(throttledAt.Add(2*time.Second-50*time.Millisecond)) {
			t.Errorf("a request reached the vendor %v after its 429, within its Retry-After", q.Time.Sub(throttledAt))
		}
	}
}

// TestFleetRefusesAtOnceBeyondMaxWait: a Retry-After longer than max_wait
// is not waited for: the requests behind it get 429 upstream_throttled at
// once, with the time left.
func TestFleetRefusesAtOnceBeyondMaxWait(t *testing.T) {
	r := redistest.Start(t)
	f := budgetFleet(t, r.Addr, faxsim.Window{}, "upstream_budget:\n  max_wait: 5s\n")
	f.sim.ThrottleNext(1, 30*time.Second)
	if first := call(t, f.gws[0], "batch"); first.status != 429 || first.retryAfter != "30" {
		t.Fatalf("the vendor's 429: %+v", first)
	}
	f.waitHeld(t, "contacts.list")
	// A request that waited would take max_wait (5 s); half of it leaves a
	// busy machine its margin.
	for i, c := range burst(t, f, 6) {
		n, _ := strconv.Atoi(c.retryAfter)
		if c.status != 429 || c.code != "upstream_throttled" || n < 25 || n > 30 || c.took > 2500*time.Millisecond {
			t.Errorf("request %d: %+v, want upstream_throttled with about 30 s at once", i, c)
		}
	}
}

// TestFleetWaitersThroughARedisOutage: requests waiting for the shared
// window when Redis dies are decided by the local fallback when their turn
// comes (docs/upstream-budget.md, Where the windows live): every one is
// answered, 200 or its 429, within max_wait; none hangs.
func TestFleetWaitersThroughARedisOutage(t *testing.T) {
	r := redistest.Start(t)
	f := budgetFleet(t, r.Addr, vendor20, `
upstream_budget:
  max_wait: 6s
  limits:
    - { name: per-route, scope: route, requests: 6, per: 3s }
`)
	for i := range 6 {
		if a := call(t, f.gws[i%3], "batch"); a.status != 200 {
			t.Fatalf("filling the window: %+v", a)
		}
	}
	var res []timedCall
	done := make(chan struct{})
	go func() { defer close(done); res = burst(t, f, 9) }()
	// Wait until every replica has its waiters, then kill Redis.
	eventually.Eventually(t, 5*time.Second, "9 waiting over the fleet", func() bool {
		return f.sum(func(g *gatewaytest.Gateway) prometheus.Collector { return g.Metrics.Limits.BudgetWaiting }) == 9
	})
	r.Kill()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("waiters still hang 15 s after Redis died")
	}
	ok := 0
	for i, c := range res {
		switch {
		case c.status == 200:
			ok++
		case c.status == 429 && c.code == "upstream_budget_exhausted":
		default:
			t.Errorf("waiter %d: %+v", i, c)
		}
		if c.took > 6*time.Second+3*time.Second { // max_wait, and a Redis timeout
			t.Errorf("waiter %d answered after %v", i, c.took)
		}
	}
	if ok == 0 {
		t.Error("no waiter was admitted by the local fallback")
	}
	for i, g := range f.gws {
		if testutil.ToFloat64(g.Metrics.Limits.BudgetFallback) == 0 {
			t.Errorf("replica %d counted no fallback", i)
		}
	}
}
