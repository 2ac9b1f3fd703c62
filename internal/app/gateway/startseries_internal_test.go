package gateway

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy"
)

// TestReloadStartsTheNewSeries: a caller, route or limit that a reload adds
// has its series at 0 from that reload on, before its first request, as the
// ones of the start have (TestSeriesFromTheStart).
func TestReloadStartsTheNewSeries(t *testing.T) {
	g, logs, reg := newTestGateway(t, "http://127.0.0.1:1")
	path := filepath.Join(t.TempDir(), "faxgate.yaml")
	cfg := testConfigYAML("http://127.0.0.1:1", `"contacts.*"`) + `    - name: newcomer
      cidrs: ["10.7.0.0/16"]
      allow: ["numbers.delete"]
routes:
  extra:
    - {name: faxes.send, method: POST, path: /v1/faxes/send}
upstream_budget:
  limits:
    - {name: daily, scope: tenant, requests: 1000, per: 24h}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name   string
		labels map[string]string
	}{
		{"faxgate_rate_limited_total", map[string]string{"caller": "newcomer"}},
		{"faxgate_denied_total", map[string]string{"caller": "newcomer", "route": "numbers.delete", "reason": "confirmation_required"}},
		{"faxgate_upstream_throttled_total", map[string]string{"route": "faxes.send"}},
		{"faxgate_upstream_401_retries_total", map[string]string{"route": "faxes.send"}},
		{"faxgate_upstream_budget_refused_total", map[string]string{"caller": "newcomer", "limit": "daily"}},
		{"faxgate_upstream_budget_refused_total", map[string]string{"caller": "local", "limit": "daily"}},
	}
	// find reads the series of name with exactly labels.
	find := func(name string, labels map[string]string) (value float64, ok bool) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		series:
			for _, m := range mf.GetMetric() {
				if len(m.GetLabel()) != len(labels) {
					continue
				}
				for _, lp := range m.GetLabel() {
					if labels[lp.GetName()] != lp.GetValue() {
						continue series
					}
				}
				return m.GetCounter().GetValue(), true
			}
		}
		return 0, false
	}
	for _, w := range want {
		if _, ok := find(w.name, w.labels); ok {
			t.Fatalf("%s%v exists before the reload that makes it known", w.name, w.labels)
		}
	}
	newReloader(g, path).reload("signal")
	if v := readGauge(t, g, "faxgate_config_last_reload_successful"); v != 1 {
		t.Fatalf("reload failed:\n%s", logs.String())
	}
	for _, w := range want {
		if v, ok := find(w.name, w.labels); !ok {
			t.Errorf("%s%v is missing after the reload", w.name, w.labels)
		} else if v != 0 {
			t.Errorf("%s%v = %v, want 0", w.name, w.labels, v)
		}
	}
}

// TestBackgroundLoopsAreKnown: every loop name the code hands to
// background.Loop or background.Guard is in backgroundLoops, so its
// faxgate_background_panics_total series exists at 0 from the start, and
// the list names no loop that is gone.
func TestBackgroundLoopsAreKnown(t *testing.T) {
	call := regexp.MustCompile(`background\.(?:Loop|Guard)\([^"]*"([a-z_]+)"`)
	found := map[string]bool{}
	root := filepath.Join("..", "..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "deploy" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range call.FindAllSubmatch(src, -1) {
			found[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(found)); !slices.Equal(got, backgroundLoops) {
		t.Fatalf("loops in the code %q, backgroundLoops %q", got, backgroundLoops)
	}
}

// TestPanicIsCounted: a panic recovered in a loop (here a reload whose
// compile panics) adds one to faxgate_background_panics_total of that loop,
// which was 0 before, and to no other.
func TestPanicIsCounted(t *testing.T) {
	g, _, _ := newTestGateway(t, "http://127.0.0.1:1")
	path := filepath.Join(t.TempDir(), "faxgate.yaml")
	if err := os.WriteFile(path, []byte(testConfigYAML("http://127.0.0.1:1", `"contacts.*"`)), 0o600); err != nil {
		t.Fatal(err)
	}
	panics := func(loop string) float64 { return testutil.ToFloat64(g.Metrics.BackgroundPanics.WithLabelValues(loop)) }
	if n := testutil.CollectAndCount(g.Metrics.BackgroundPanics); n != len(backgroundLoops) {
		t.Fatalf("%d loop series at start, want %d", n, len(backgroundLoops))
	}
	rl := newReloader(g, path)
	rl.compile = func(*config.Config, *policy.Rules) (*policy.Rules, error) { panic("compile bug") }
	rl.reload("signal")
	if v := panics("config_reload"); v != 1 {
		t.Errorf("config_reload panics = %v, want 1", v)
	}
	for _, l := range backgroundLoops {
		if v := panics(l); l != "config_reload" && v != 0 {
			t.Errorf("%s panics = %v, want 0", l, v)
		}
	}
}
