package deploytest

// The chart's monitoring objects: the PrometheusRule (the mixin's rules for
// the release's job, with its overrides) and the dashboard ConfigMap.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/faxgate/faxgate/deploy/mixin"
)

// TestChartShipsTheRulesAndDashboard: Helm reads only files inside the
// chart, so the chart keeps copies of deploy/prometheus/faxgate-rules.yaml
// and deploy/grafana/faxgate.json (make mixin); they must not drift,
// and the rendered objects carry them whole.
func TestChartShipsTheRulesAndDashboard(t *testing.T) {
	for copyPath, source := range map[string]string{
		chartDir + "/files/faxgate-rules.yaml": repoRoot + "/deploy/prometheus/faxgate-rules.yaml",
		chartDir + "/files/faxgate.json":       repoRoot + "/deploy/grafana/faxgate.json",
	} {
		a, err1 := os.ReadFile(copyPath)
		b, err2 := os.ReadFile(source)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run make mixin", copyPath, source)
		}
	}
	objs := objects(t, mustRender(t, "testdata/values/everything.yaml"))
	var dash *corev1.ConfigMap
	for _, o := range objs {
		if o.Kind == "ConfigMap" && strings.HasSuffix(o.Metadata.Name, "-dashboard") {
			dash = &corev1.ConfigMap{}
			if err := o.strict(dash); err != nil {
				t.Fatal(err)
			}
		}
	}
	if dash == nil || dash.Labels["grafana_dashboard"] != "1" || dash.Namespace != "monitoring" {
		t.Fatalf("dashboard ConfigMap %+v", dash)
	}
	src, _ := os.ReadFile(repoRoot + "/deploy/grafana/faxgate.json")
	if strings.TrimSpace(dash.Data["faxgate.json"]) != strings.TrimSpace(string(src)) {
		t.Error("the dashboard ConfigMap differs from deploy/grafana/faxgate.json")
	}
}

// TestChartRulesAreTheMixinsWithTheReleasesOverrides: the PrometheusRule is
// what cmd/faxgate-mixin writes for the release's job and the same
// prometheusRule values, with the default values and with every kind of
// override (disable, severity, for, labels, additionalRuleLabels,
// runbookBaseURL): the chart's template and the Go generator apply overrides
// the same way.
func TestChartRulesAreTheMixinsWithTheReleasesOverrides(t *testing.T) {
	for _, values := range []string{"testdata/values/default.yaml", "testdata/values/everything.yaml"} {
		t.Run(filepath.Base(values), func(t *testing.T) {
			objs := objects(t, mustRender(t, values, "prometheusRule.enabled=true"))
			obj := find(objs, "PrometheusRule")
			var pr prometheusRule
			if err := obj.strict(&pr); err != nil {
				t.Fatal(err)
			}
			var v struct {
				PrometheusRule mixin.Overrides `json:"prometheusRule"`
			}
			b, err := os.ReadFile(values)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			opts := mixin.Options{Selector: `job="` + obj.Metadata.Name + `"`, Namespace: "gateways", Overrides: v.PrometheusRule}
			if err := opts.Validate(); err != nil {
				t.Fatal(err)
			}
			gotJSON, _ := json.Marshal(pr.Spec)
			wantJSON, _ := json.Marshal(mixin.Rules(opts))
			var got, want any
			_ = json.Unmarshal(gotJSON, &got)
			_ = json.Unmarshal(wantJSON, &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the PrometheusRule differs from faxgate-mixin's rules with the same overrides:\n got %s\nwant %s", gotJSON, wantJSON)
			}
		})
	}
	// The overrides of everything.yaml did something.
	objs := objects(t, mustRender(t, "testdata/values/everything.yaml"))
	var pr prometheusRule
	if err := find(objs, "PrometheusRule").strict(&pr); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range pr.Spec.Groups[0].Rules {
		seen[r.Alert] = true
		if r.Labels["tier"] != "gateway" || !strings.HasPrefix(r.Annotations["runbook_url"], "https://runbooks.example.com/faxgate.md#faxgate") {
			t.Errorf("%s: labels %v, runbook_url %q: additionalRuleLabels or runbookBaseURL not applied", r.Alert, r.Labels, r.Annotations["runbook_url"])
		}
		switch r.Alert {
		case "FaxgateUpstreamSlow":
			if r.Labels["severity"] != "info" || r.For != "30m" || r.Labels["team"] != "fax" {
				t.Errorf("FaxgateUpstreamSlow: %+v, want severity info, for 30m, team fax", r)
			}
		case "FaxgateDown":
			if r.Labels["severity"] != "warning" || r.Labels["team"] != "platform" {
				t.Errorf("FaxgateDown: labels %v, want the override's severity and the additional team", r.Labels)
			}
		case "FaxgateAbsent":
			if r.For != "0s" {
				t.Errorf("FaxgateAbsent: for %q, want 0s", r.For)
			}
		}
	}
	if seen["FaxgateCallerRateLimited"] || !seen["FaxgateAbsent"] {
		t.Errorf("alerts rendered %v: FaxgateCallerRateLimited should be dropped, FaxgateAbsent kept", seen)
	}
}

// TestChartRulesSelectTheReleasesJob: the rules select the job the chart's
// ServiceMonitor gives the release's targets, its full name, whatever
// fullnameOverride says. Regression: the rules file's job=~".*faxgate.*"
// was copied unchanged, so with a full name without "faxgate" FaxgateAbsent
// fired forever and no other alert saw the release.
func TestChartRulesSelectTheReleasesJob(t *testing.T) {
	objs := objects(t, mustRender(t, "testdata/values/everything.yaml", "fullnameOverride=fax-gw"))
	var pr prometheusRule
	if err := find(objs, "PrometheusRule").strict(&pr); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if strings.Contains(r.Expr, "faxgate.*") || !strings.Contains(r.Expr, `job="fax-gw"`) {
				t.Errorf("%s: expr %q, want it to select job=\"fax-gw\" only", r.Alert, r.Expr)
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("%d rules rendered", n)
	}
	sm := find(objs, "ServiceMonitor")
	if sm == nil || !strings.Contains(string(sm.raw), `"replacement":"fax-gw"`) {
		t.Fatalf("no ServiceMonitor setting job to fax-gw: %+v", sm)
	}
}
