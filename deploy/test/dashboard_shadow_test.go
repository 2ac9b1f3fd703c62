package deploytest

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDashboardShadowQueries evaluates the "Candidate vs live" row's queries,
// as the dashboard ships them, with promtool on decisions of two replicas of
// one release. PromQL cannot compare two labels of a series, so the queries
// match live against candidate through label_join; this proves they count
// what their titles say: agreement is the share of decisions with equal
// outcomes, and each difference is counted once, by caller, by route and by
// outcome pair, also when a (live, candidate) pair and its (candidate,
// candidate) twin exist side by side; and a candidate that agrees on nothing
// draws 0, not no line.
func TestDashboardShadowQueries(t *testing.T) {
	d := readDashboard(t, dashboardFile)
	exprs := map[string]string{}
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$cluster", ".*", "$namespace", "fax", "$job", "faxgate",
		"$caller", ".*", "$route", ".*")
	for _, p := range d.Panels {
		if len(p.Targets) == 1 && strings.Contains(p.Targets[0].Expr, "faxgate_shadow_decisions_total") {
			exprs[p.Title] = grafana.Replace(p.Targets[0].Expr)
		}
	}
	if got, want := slices.Sorted(maps.Keys(exprs)), []string{"Candidate agreement", "Differences by caller", "Differences by outcome", "Differences by route"}; !slices.Equal(got, want) {
		t.Fatalf("panels over faxgate_shadow_decisions_total: %v, want %v", got, want)
	}

	// Per second over the last 5 minutes: 0+6 a minute is 0.1/s.
	series := func(pod, caller, route, live, cand, values string) map[string]string {
		return map[string]string{
			"series": `faxgate_shadow_decisions_total{caller="` + caller + `",route="` + route + `",live="` + live + `",candidate="` + cand +
				`",namespace="fax",pod="faxgate-` + pod + `",instance="10.0.0.` + pod + `:9090",job="faxgate"}`,
			"values": values,
		}
	}
	input := []map[string]string{
		series("0", "intake", "contacts.list", "allowed", "allowed", "0+6x10"),                                  // agrees, 0.1
		series("1", "intake", "contacts.list", "allowed", "allowed", "0+6x10"),                                  // agrees, 0.1
		series("0", "batch", "contacts.list", "allowed", "allowed", "0x10"),                                     // at 0 from the start
		series("0", "batch", "faxes.send", "allowed", "rate_limited", "0+6x10"),                                 // differs, 0.1
		series("0", "batch", "faxes.send", "rate_limited", "rate_limited", "0+6x10"),                            // agrees, 0.1
		series("1", "intake", "faxes.send", "rate_limited", "allowed", "0+18x10"),                               // differs, 0.3
		series("1", "intake", "faxes.send", "upstream_budget_exhausted", "upstream_budget_exhausted", "0+6x10"), // agrees, 0.1
	}
	// Agreeing 0.4 of 0.8: differing 0.1 (batch) + 0.3 (intake), all on faxes.send.
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr       string   `json:"expr"`
		EvalTime   string   `json:"eval_time"`
		ExpSamples []sample `json:"exp_samples"`
	}
	want := map[string][]sample{
		"Candidate agreement":    {{`{namespace="fax",job="faxgate"}`, 0.5}},
		"Differences by caller":  {{`{caller="batch"}`, 0.1}, {`{caller="intake"}`, 0.3}},
		"Differences by route":   {{`{route="faxes.send"}`, 0.4}},
		"Differences by outcome": {{`{live="allowed",candidate="rate_limited"}`, 0.1}, {`{live="rate_limited",candidate="allowed"}`, 0.3}},
	}
	var tests []exprTest
	for title, samples := range want {
		tests = append(tests, exprTest{Expr: exprs[title], EvalTime: "10m", ExpSamples: samples})
	}
	// A candidate that agrees on everything: agreement 1, no difference.
	agrees := []exprTest{
		{Expr: exprs["Candidate agreement"], EvalTime: "10m", ExpSamples: []sample{{`{namespace="fax",job="faxgate"}`, 1}}},
		{Expr: exprs["Differences by caller"], EvalTime: "10m", ExpSamples: []sample{}},
	}
	file := map[string]any{
		"evaluation_interval": "1m",
		"tests": []map[string]any{
			{"name": "shadow decisions", "interval": "1m", "input_series": input, "promql_expr_test": tests},
			{"name": "a candidate that agrees", "interval": "1m", "input_series": input[:3], "promql_expr_test": agrees},
			// One that agrees on nothing: agreement 0, a line at the bottom, not none.
			{"name": "a candidate that agrees on nothing", "interval": "1m", "input_series": []map[string]string{input[3], input[5]},
				"promql_expr_test": []exprTest{{Expr: exprs["Candidate agreement"], EvalTime: "10m", ExpSamples: []sample{{`{namespace="fax",job="faxgate"}`, 0}}}}},
		},
	}
	b, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shadow_test.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, dir, tool(t, "promtool"), "test", "rules", "shadow_test.yaml")
	if err != nil || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s\n%s", err, out, b)
	}
}
