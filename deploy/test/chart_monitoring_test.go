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
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/faxgate/faxgate/deploy/mixin"
)

// TestChartShipsTheRulesAndDashboard: Helm reads only files inside the
// chart, so the chart keeps a copy of deploy/grafana/faxgate.json (make
// mixin; the rules' source is checked by deploy/mixin's tests); it must not
// drift, and the rendered ConfigMap carries it whole but for the release's
// own uid and title.
func TestChartShipsTheRulesAndDashboard(t *testing.T) {
	a, err1 := os.ReadFile(chartDir + "/files/faxgate.json")
	src, err2 := os.ReadFile(repoRoot + "/deploy/grafana/faxgate.json")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if !bytes.Equal(a, src) {
		t.Errorf("the chart's files/faxgate.json differs from deploy/grafana/faxgate.json: run make mixin")
	}
	dash := dashboardConfigMap(t, mustRender(t, "testdata/values/everything.yaml"))
	if dash.Labels["grafana_dashboard"] != "1" || dash.Namespace != "monitoring" {
		t.Fatalf("dashboard ConfigMap %+v", dash)
	}
	var got, want map[string]any
	if err := json.Unmarshal([]byte(dash.Data["faxgate.json"]), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(src, &want); err != nil {
		t.Fatal(err)
	}
	if got["uid"] == want["uid"] || got["title"] != "faxgate gateways/faxgate" {
		t.Errorf("uid %v, title %v: want the release's own", got["uid"], got["title"])
	}
	got["uid"], got["title"] = want["uid"], want["title"]
	if !reflect.DeepEqual(got, want) {
		t.Error("the dashboard ConfigMap differs from deploy/grafana/faxgate.json beyond its uid and title")
	}
}

// dashboardConfigMap is the rendered dashboard ConfigMap.
func dashboardConfigMap(t *testing.T, rendered string) *corev1.ConfigMap {
	t.Helper()
	for _, o := range objects(t, rendered) {
		if o.Kind == "ConfigMap" && strings.HasSuffix(o.Metadata.Name, "-dashboard") {
			dash := &corev1.ConfigMap{}
			if err := o.strict(dash); err != nil {
				t.Fatal(err)
			}
			return dash
		}
	}
	t.Fatal("no dashboard ConfigMap rendered")
	return nil
}

// TestChartRulesAreTheMixinsWithTheReleasesOverrides: the PrometheusRule is
// what cmd/faxgate-mixin writes for the release's job and the same
// prometheusRule values, with the default values and with every kind of
// override (disable, severity, for, labels, threshold, additionalRuleLabels,
// runbookBaseURL) and with a short token.refresh_before: the chart's template
// and the Go generator apply overrides and thresholds the same way.
func TestChartRulesAreTheMixinsWithTheReleasesOverrides(t *testing.T) {
	for _, values := range []string{"testdata/values/default.yaml", "testdata/values/everything.yaml", "testdata/values/hpa-redis.yaml"} {
		t.Run(filepath.Base(values), func(t *testing.T) {
			objs := objects(t, mustRender(t, values, "prometheusRule.enabled=true"))
			obj := find(objs, "PrometheusRule")
			var pr prometheusRule
			if err := obj.strict(&pr); err != nil {
				t.Fatal(err)
			}
			var v struct {
				PrometheusRule mixin.Overrides `json:"prometheusRule"`
				Config         struct {
					Token struct {
						RefreshBefore string `json:"refresh_before"`
					} `json:"token"`
				} `json:"config"`
			}
			b, err := os.ReadFile(values)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			refresh := time.Hour
			if r := v.Config.Token.RefreshBefore; r != "" {
				if refresh, err = time.ParseDuration(r); err != nil {
					t.Fatal(err)
				}
			}
			opts := mixin.Options{Selector: `job="` + obj.Metadata.Name + `"`, Namespace: "gateways", RefreshBefore: refresh, Overrides: v.PrometheusRule}
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
		case "FaxgateCertificateExpiryCritical":
			if !strings.HasSuffix(r.Expr, "< 0.25 * 86400") {
				t.Errorf("FaxgateCertificateExpiryCritical: %s, want the threshold of 0.25 days", r.Expr)
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
			if strings.Contains(r.Expr, "faxgate.*") || strings.Count(r.Expr, `{`) != strings.Count(r.Expr, `job="fax-gw",namespace="gateways"}`) {
				t.Errorf("%s: expr %q, want every selector to select job=\"fax-gw\" in namespace gateways only", r.Alert, r.Expr)
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
