package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestRedisBudgetCountsSpentOncePerAdmission: with the windows in Redis,
// each replica counts the requests it admitted, once each, by caller and
// limit; a refused request is not spent, and its decision still sets the
// used ratio's time.
func TestRedisBudgetCountsSpentOncePerAdmission(t *testing.T) {
	r := redistest.Start(t)
	bud := budgetOf([]config.BudgetLimit{{Name: "tenant", Scope: "tenant", Requests: 4, Per: time.Minute}}, nil)
	reps := replicas(t, r.Addr, 2, bud, 2)
	ctx := context.Background()
	for range 3 {
		reps[0].b.Admit(ctx, "batch", "contacts.list", nil)
	}
	for range 3 {
		reps[1].b.Admit(ctx, "intake", "contacts.list", nil)
	}
	if a, b := testutil.ToFloat64(reps[0].met.BudgetSpent.WithLabelValues("batch", "tenant")),
		testutil.ToFloat64(reps[1].met.BudgetSpent.WithLabelValues("intake", "tenant")); a != 3 || b != 1 {
		t.Errorf("spent: batch %v on replica 0 (want 3), intake %v on replica 1 (want 1: the window holds 4)", a, b)
	}
	if got := testutil.ToFloat64(reps[1].met.BudgetUsedAt.WithLabelValues("tenant", "")); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("used ratio's time %v is not the last decision's", got)
	}
}
