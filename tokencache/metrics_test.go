package tokencache_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/tokencache"
)

// TestStartStoreSeries: with a shared store, every op's errors and every
// lease result exist at 0 before the first one (docs/metrics-and-alerts.md,
// Series from the start); without one they are absent.
func TestStartStoreSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := tokencache.NewMetrics(reg)
	for name, want := range map[string]int{"faxgate_token_store_errors_total": 0, "faxgate_token_lease_total": 0} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("without a store: %s has %d series (err %v), want %d", name, n, err, want)
		}
	}
	m.StartStore()
	for name, want := range map[string]int{"faxgate_token_store_errors_total": len(tokencache.StoreOps), "faxgate_token_lease_total": 4} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("with a store: %s has %d series (err %v), want %d", name, n, err, want)
		}
	}
	if v := testutil.ToFloat64(m.StoreErrors.WithLabelValues("subscribe")); v != 0 {
		t.Errorf("store errors{op=subscribe} = %v, want 0", v)
	}
}
