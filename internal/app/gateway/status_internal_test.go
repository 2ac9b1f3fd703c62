package gateway

import (
	"context"
	"testing"

	"github.com/faxgate/faxgate/policy/limit"
)

// waitingBudget is a budget whose requests wait, as one that implements
// BudgetWaiters would report them.
type waitingBudget struct{ waiting map[string]int }

func (b waitingBudget) Admit(context.Context, string, string) limit.BudgetDecision {
	return limit.BudgetDecision{Allowed: true}
}

func (b waitingBudget) Status(context.Context) limit.BudgetStatus {
	return limit.BudgetStatus{Backend: "local", Limits: []limit.LimitStatus{}}
}

func (b waitingBudget) WaitingByCaller() map[string]int { return b.waiting }

// TestStatusReadsWaitersThroughTheInterface: whatever part implements
// BudgetWaiters, its counts reach the callers' rows and the budget's total;
// until one does, the page says nothing waits.
func TestStatusReadsWaitersThroughTheInterface(t *testing.T) {
	g, _, _ := newTestGateway(t, "http://127.0.0.1:1")
	st := g.status(context.Background())
	if st.Budget.WaitingKnown || st.Budget.Waiting != 0 {
		t.Fatalf("budget %+v with nothing implementing BudgetWaiters", st.Budget)
	}

	rules := *g.Handler.Rules()
	rules.Budget = waitingBudget{waiting: map[string]int{"local": 3, "gone": 0}}
	g.Handler.SetRules(&rules)
	st = g.status(context.Background())
	if !st.Budget.WaitingKnown || st.Budget.Waiting != 3 || st.Budget.WaitingByCaller["local"] != 3 || len(st.Budget.WaitingByCaller) != 1 {
		t.Errorf("budget %+v, want 3 waiting, all of local", st.Budget)
	}
	if len(st.Callers) == 0 || st.Callers[0].Name != "local" || st.Callers[0].Waiting != 3 {
		t.Errorf("callers %+v, want local with 3 waiting", st.Callers)
	}
	if p := layout(st); p.Sections[4].Note != "Backend local. Requests waiting: 3." {
		t.Errorf("budget note %q", p.Sections[4].Note)
	}
}
