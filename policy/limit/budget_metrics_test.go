package limit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/config"
)

// TestBudgetSpentByCallerFromTheStart: faxgate_upstream_budget_spent_total
// exists at 0 for every configured caller and limit before any request (so
// the first one shows in increase()), and counts only admitted requests,
// under every limit that counted them: an unmatched route counts in the
// tenant limit alone.
func TestBudgetSpentByCallerFromTheStart(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 0)}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	cfg := budgetConfig([]config.BudgetLimit{
		{Name: "tenant", Scope: "tenant", Requests: 10, Per: time.Minute},
		{Name: "per-route", Scope: "route", Requests: 3, Per: time.Minute},
	}, nil)
	b := NewBudget(budgetCfg(cfg), clk.now, Deps{Metrics: m}, nil)
	var callers []string
	for _, c := range cfg.Callers.List {
		callers = append(callers, c.Name)
	}
	up := CompileUpstream(cfg.UpstreamBudget, b)
	m.StartSeries(callers, nil, &up) // as the assembler does whenever rules are applied

	want := `
# HELP faxgate_upstream_budget_spent_total Requests admitted to the upstream and counted against an upstream_budget limit, by caller and limit.
# TYPE faxgate_upstream_budget_spent_total counter
faxgate_upstream_budget_spent_total{caller="batch",limit="per-route"} 0
faxgate_upstream_budget_spent_total{caller="batch",limit="tenant"} 0
faxgate_upstream_budget_spent_total{caller="billing",limit="per-route"} 0
faxgate_upstream_budget_spent_total{caller="billing",limit="tenant"} 0
faxgate_upstream_budget_spent_total{caller="intake",limit="per-route"} 0
faxgate_upstream_budget_spent_total{caller="intake",limit="tenant"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "faxgate_upstream_budget_spent_total"); err != nil {
		t.Fatalf("before any request: %v", err)
	}

	// 5 of batch's requests to one route: 3 admitted (the route's limit),
	// 2 refused; one to an unmatched path counts in the tenant limit only.
	if got, _ := admitN(b, "batch", "contacts.list", 5); got != 3 {
		t.Fatalf("admitted %d, want 3", got)
	}
	if !b.Admit(context.Background(), "intake", "unmatched", nil).Allowed {
		t.Fatal("unmatched refused")
	}
	for _, tc := range []struct {
		caller, limit string
		want          float64
	}{
		{"batch", "tenant", 3}, {"batch", "per-route", 3}, {"intake", "tenant", 1}, {"intake", "per-route", 0}, {"billing", "tenant", 0},
	} {
		if got := testutil.ToFloat64(m.BudgetSpent.WithLabelValues(tc.caller, tc.limit)); got != tc.want {
			t.Errorf("spent{caller=%q,limit=%q} = %v, want %v", tc.caller, tc.limit, got, tc.want)
		}
	}
}

// TestBudgetUsedRatioCarriesItsTime: each used ratio comes with the time of
// the decision that set it, from the budget's clock, so that an alert can
// tell a current ratio from one left over once traffic stopped.
func TestBudgetUsedRatioCarriesItsTime(t *testing.T) {
	clk := &fakeNow{time.Unix(1_000_000, 500_000_000)}
	b, m := localBudget(t, budgetConfig([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 4, Per: time.Minute}}, nil), clk)
	admitN(b, "batch", "contacts.list", 3)
	if got := testutil.ToFloat64(m.BudgetUsedRatio.WithLabelValues("tenant", "")); got != 0.75 {
		t.Errorf("used ratio %v, want 0.75", got)
	}
	if got := testutil.ToFloat64(m.BudgetUsedAt.WithLabelValues("tenant", "")); got != 1_000_000.5 {
		t.Errorf("used ratio's time %v, want 1000000.5", got)
	}
	// Time passes with no decision: the ratio and its time stay as they
	// were (the alert sees its age grow); the next decision moves both.
	clk.advance(10 * time.Minute)
	if got := testutil.ToFloat64(m.BudgetUsedAt.WithLabelValues("tenant", "")); got != 1_000_000.5 {
		t.Errorf("the time moved without a decision: %v", got)
	}
	admitN(b, "batch", "contacts.list", 1)
	if ratio, at := testutil.ToFloat64(m.BudgetUsedRatio.WithLabelValues("tenant", "")), testutil.ToFloat64(m.BudgetUsedAt.WithLabelValues("tenant", "")); ratio != 0.25 || at != 1_000_600.5 {
		t.Errorf("after a decision 10 minutes later: ratio %v at %v, want 0.25 at 1000600.5", ratio, at)
	}
}
