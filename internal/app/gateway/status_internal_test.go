package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/policy/limit"
)

// TestStatusShowsWaiters: requests waiting in the gateway's Waitlist reach
// the callers' rows, the budget's total and the budget section's note.
func TestStatusShowsWaiters(t *testing.T) {
	g, _, _ := newTestGateway(t, "http://127.0.0.1:1")
	st := g.status(context.Background())
	if st.Budget.Waiting != 0 || st.Budget.MaxWaitSeconds != 0 {
		t.Fatalf("budget %+v before anything waits, with max_wait 0s", st.Budget)
	}
	if p := layout(st); !strings.Contains(p.Sections[4].Note, "Requests waiting: 0 (upstream_budget.max_wait is 0s") {
		t.Errorf("budget note %q", p.Sections[4].Note)
	}

	// Three requests of local wait for a hold that lasts longer than the
	// test, until their context ends.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	refuse := func(context.Context, []string) limit.Outcome {
		return limit.Outcome{Key: limit.HoldKey("contacts.list"), RetryAfter: 30 * time.Second, Throttled: true}
	}
	for range 3 {
		go func() {
			g.Waitlist.Admit(ctx, limit.WaitRequest{Caller: "local", MaxWait: time.Minute, MaxWaiting: 10,
				Keys: []string{limit.HoldKey("contacts.list")}, Reserved: []bool{false}}, refuse)
			done <- struct{}{}
		}()
	}
	defer func() {
		cancel()
		for range 3 {
			<-done
		}
	}()
	eventually.Eventually(t, 5*time.Second, "3 requests waiting", func() bool { return g.Waitlist.Waiters().Total >= 3 })
	st = g.status(context.Background())
	if st.Budget.Waiting != 3 || st.Budget.WaitingByCaller["local"] != 3 || len(st.Budget.WaitingByCaller) != 1 {
		t.Errorf("budget %+v, want 3 waiting, all of local", st.Budget)
	}
	if len(st.Callers) == 0 || st.Callers[0].Name != "local" || st.Callers[0].Waiting != 3 {
		t.Errorf("callers %+v, want local with 3 waiting", st.Callers)
	}
	if p := layout(st); !strings.Contains(p.Sections[4].Note, "Requests waiting: 3 ") {
		t.Errorf("budget note %q", p.Sections[4].Note)
	}
}
