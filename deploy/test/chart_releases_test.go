package deploytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestTwoReleasesOfOneName is the regression test for two releases named
// alike firing each other's alerts: the docs' own `helm install faxgate`, in
// payments and in fax-staging, rendered two PrometheusRules with the same
// expressions (job="faxgate"), so every staging incident also fired with
// team=payments, and FaxgateAbsent of one stayed silent while the other was
// up. promtool evaluates both releases' rendered rules together, as one
// Prometheus does, on the series of both (the alerting e2e does the same
// under a real Prometheus and Alertmanager).
func TestTwoReleasesOfOneName(t *testing.T) {
	promtool := tool(t, "promtool")
	dir := t.TempDir()
	var files []string
	uids := map[string]bool{}
	for _, rel := range []struct{ ns, team string }{{"payments", "payments"}, {"fax-staging", "staging"}} {
		out, err := run(t, ".", tool(t, "helm"), "template", "faxgate", chartDir, "--namespace", rel.ns, "--kube-version", kubeVersion,
			"-f", "testdata/values/default.yaml", "--set", "prometheusRule.enabled=true,grafanaDashboard.enabled=true",
			"--set", "prometheusRule.additionalRuleLabels.team="+rel.team)
		if err != nil {
			t.Fatalf("%s: %v\n%s", rel.ns, err, out)
		}
		var pr prometheusRule
		if err := find(objects(t, out), "PrometheusRule").strict(&pr); err != nil {
			t.Fatal(err)
		}
		b, err := yaml.Marshal(pr.Spec)
		if err != nil {
			t.Fatal(err)
		}
		name := rel.ns + ".rules.yaml"
		files = append(files, name)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		var dash map[string]any
		if err := json.Unmarshal([]byte(dashboardConfigMap(t, out).Data["faxgate.json"]), &dash); err != nil {
			t.Fatal(err)
		}
		uids[dash["uid"].(string)] = true
	}
	if len(uids) != 2 {
		t.Errorf("the two releases' dashboards share a uid: %v", uids)
	}

	// Series as the ServiceMonitor's targets carry them: job is the full
	// name (faxgate for both), namespace tells the releases apart.
	series := func(ns string, pods int, metric, values string) string {
		var b strings.Builder
		for i := range pods {
			b.WriteString("  - series: " + metric + `{namespace="` + ns + `",job="faxgate",pod="faxgate-` + string(rune('a'+i)) + `",instance="10.1.0.` + string(rune('1'+i)) + `:9090"}` + "\n    values: '" + values + "'\n")
		}
		return b.String()
	}
	absent := func(ns, team string) string {
		return `    - exp_labels: {severity: critical, job: faxgate, namespace: ` + ns + `, team: ` + team + `}
      exp_annotations:
        summary: No faxgate replica is up.
        description: 'For 5 minutes no target of ` + ns + `/faxgate has answered a scrape: every replica is down, or none is discovered at all (scaled to zero, deleted, or the ServiceMonitor no longer matches).'
        runbook_url: https://github.com/faxgate/faxgate/blob/main/docs/runbook.md#faxgateabsent
`
	}
	tests := `rule_files: [` + strings.Join(files, ", ") + `]
evaluation_interval: 1m
tests:
- name: staging's replicas are all down while payments' are up
  interval: 1m
  input_series:
` + series("payments", 2, "up", "1x10") + series("fax-staging", 2, "up", "0x10") + `  alert_rule_test:
  - eval_time: 6m
    alertname: FaxgateAbsent
    exp_alerts:
` + absent("fax-staging", "staging") + `  - eval_time: 6m
    alertname: FaxgateDown
    exp_alerts: []
- name: staging's replicas are gone (no target) while payments' are up
  interval: 1m
  input_series:
` + series("payments", 2, "up", "1x10") + `  alert_rule_test:
  - eval_time: 6m
    alertname: FaxgateAbsent
    exp_alerts:
` + absent("fax-staging", "staging") + `- name: payments' token renewals fail, staging's are fine
  interval: 1m
  input_series:
` + series("payments", 1, "faxgate_token_refresh_total", "0x30") + series("fax-staging", 1, "faxgate_token_refresh_total", "0x30") +
		strings.ReplaceAll(series("payments", 1, "faxgate_token_refresh_total", "0 1+1x30"), "faxgate_token_refresh_total{", `faxgate_token_refresh_total{result="invalid_key",`) + `  alert_rule_test:
  - eval_time: 5m
    alertname: FaxgateAPIKeyRejected
    exp_alerts:
    - exp_labels: {severity: critical, job: faxgate, namespace: payments, team: payments}
      exp_annotations:
        summary: The upstream rejected faxgate's API key.
        description: payments/faxgate was told the API secret key is invalid; no new token can be had until the key is fixed.
        runbook_url: https://github.com/faxgate/faxgate/blob/main/docs/runbook.md#faxgateapikeyrejected
`
	if err := os.WriteFile(filepath.Join(dir, "releases_test.yaml"), []byte(tests), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, dir, promtool, "test", "rules", "releases_test.yaml")
	if err != nil || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s\n%s", err, out, tests)
	}
}
