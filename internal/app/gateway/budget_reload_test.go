package gateway

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestReloadAppliesUpstreamBudget: upstream_budget reloads like rate_limit.
// Adding a limit applies to the next request, a changed share is used, the
// windows of a limit that keeps its name carry over, and no restart is asked
// for.
func TestReloadAppliesUpstreamBudget(t *testing.T) {
	g, logs, _ := newTestGateway(t, "http://127.0.0.1:1")
	if g.Handler.Rules().Upstream.Budget != nil {
		t.Fatal("a budget without limits")
	}
	path := filepath.Join(t.TempDir(), "faxgate.yaml")
	write := func(extra string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(testConfigYAML("http://127.0.0.1:1", `"contacts.*"`)+extra), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rl := newReloader(g, path)
	admit := func(n int) (admitted int) {
		for range n {
			if g.Handler.Rules().Upstream.Budget.Admit(context.Background(), "local", "contacts.list", nil).Allowed {
				admitted++
			}
		}
		return admitted
	}

	write("upstream_budget:\n  limits:\n    - {name: tenant, scope: tenant, requests: 3, per: 1h}\n")
	rl.reload("signal")
	if g.Handler.Rules().Upstream.Budget == nil {
		t.Fatalf("the added limit was not applied:\n%s", logs.String())
	}
	if got := admit(5); got != 3 {
		t.Errorf("admitted %d under a limit of 3", got)
	}
	// A larger limit of the same name keeps the 3 already counted.
	write("upstream_budget:\n  limits:\n    - {name: tenant, scope: tenant, requests: 5, per: 1h}\n  shares:\n    local: {cap: 0.8}\n")
	rl.reload("signal")
	if got := admit(5); got != 1 {
		t.Errorf("after the reload admitted %d, want cap 4 - 3 already counted", got)
	}
	if v := readGauge(t, g, "faxgate_config_restart_required"); v != 0 {
		t.Errorf("upstream_budget asked for a restart:\n%s", logs.String())
	}
}

// readGauge is a gauge without labels as a scrape of g's registry reads it.
func readGauge(t *testing.T, g *Gateway, name string) float64 {
	t.Helper()
	mfs, err := g.deps.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}
