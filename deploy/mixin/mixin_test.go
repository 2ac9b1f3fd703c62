package mixin

import (
	"bytes"
	"maps"
	"os"
	"strings"
	"testing"
)

// TestShippedFilesAreCurrent: the rules and dashboard under deploy/ and in
// the Helm chart are this package's output with the default options. After
// changing the Go source, run make mixin.
func TestShippedFilesAreCurrent(t *testing.T) {
	rules, err := Rules(Options{}).YAML("")
	if err != nil {
		t.Fatal(err)
	}
	dash, err := Dashboard().JSON()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{
		"../prometheus/faxgate-rules.yaml":         rules,
		"../helm/faxgate/files/faxgate-rules.yaml": rules,
		"../grafana/faxgate.json":                  dash,
		"../helm/faxgate/files/faxgate.json":       dash,
	} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make mixin", path)
		}
	}
}

// TestREADMEAlertTableIsCurrent: the README's alert table is the
// generated one, and every alert says what to do first.
func TestREADMEAlertTableIsCurrent(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := WithAlertTable(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Error("README.md's alert table is stale: run make mixin")
	}
	for _, a := range alerts(newSel("")) {
		if strings.TrimSpace(a.FirstStep) == "" || strings.Contains(a.FirstStep, "|") {
			t.Errorf("%s: first step %q (empty, or breaks the table)", a.Name, a.FirstStep)
		}
	}
}

// TestSelectorReachesEveryRule: a selector given once is in every rule's
// expression, and the default one is left nowhere.
func TestSelectorReachesEveryRule(t *testing.T) {
	const selector = `job="payments-fax",env="prod"`
	rf := Rules(Options{Selector: selector})
	n := 0
	for _, r := range rf.Groups[0].Rules {
		n++
		if !strings.Contains(r.Expr, selector) || strings.Contains(r.Expr, DefaultSelector) {
			t.Errorf("%s: %s", r.Alert, r.Expr)
		}
		// Every series selector of the expression carries it: as many
		// selectors as metric names with braces.
		if got, want := strings.Count(r.Expr, selector), strings.Count(r.Expr, "{"); got != want {
			t.Errorf("%s: selector %d times in %d selectors: %s", r.Alert, got, want, r.Expr)
		}
	}
	if n != len(alerts(sel{})) {
		t.Errorf("%d rules, want %d", n, len(alerts(sel{})))
	}
}

func TestOverrides(t *testing.T) {
	off, on := false, true
	o := Options{Overrides: Overrides{
		Alerts: map[string]AlertOverride{
			"FaxgateCallerRateLimited": {Enabled: &off},
			"FaxgateDown":              {Enabled: &on, Severity: "warning", For: "15m", Labels: map[string]string{"team": "fax", "severity": "info"}},
		},
		AdditionalRuleLabels: map[string]string{"team": "platform", "cluster_role": "edge"},
		RunbookBaseURL:       "https://wiki.example.com/faxgate",
	}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	rules := map[string]Rule{}
	for _, r := range Rules(o).Groups[0].Rules {
		rules[r.Alert] = r
	}
	if _, ok := rules["FaxgateCallerRateLimited"]; ok {
		t.Error("a disabled alert is rendered")
	}
	down := rules["FaxgateDown"]
	// The override's severity wins over its own labels, which win over the
	// additional labels.
	if down.Labels["severity"] != "warning" || down.Labels["team"] != "fax" || down.Labels["cluster_role"] != "edge" || down.For != "15m" {
		t.Errorf("FaxgateDown: labels %v, for %q", down.Labels, down.For)
	}
	abs := rules["FaxgateAbsent"]
	if abs.Labels["severity"] != "critical" || abs.Labels["team"] != "platform" || abs.For != "5m" {
		t.Errorf("FaxgateAbsent: labels %v, for %q", abs.Labels, abs.For)
	}
	if got := abs.Annotations["runbook_url"]; got != "https://wiki.example.com/faxgate#faxgateabsent" {
		t.Errorf("runbook_url %q", got)
	}
	// The defaults are untouched by another call's overrides.
	if r := Rules(Options{}).Groups[0].Rules[0]; r.Labels["team"] != "" || r.Labels["severity"] != "critical" {
		t.Errorf("default FaxgateDown labels %v", r.Labels)
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	o := Options{Overrides: Overrides{Alerts: map[string]AlertOverride{
		"FaxgateDwn":    {},
		"FaxgateDown":   {Severity: "page", For: "5 minutes"},
		"FaxgateAbsent": {For: "1h30m"},
	}}}
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"alerts.FaxgateDwn: no such alert",
		`alerts.FaxgateDown.severity: "page" is not one of critical, warning, info`,
		`alerts.FaxgateDown.for: "5 minutes" is not a Prometheus duration`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "FaxgateAbsent") {
		t.Errorf("a valid for: was refused: %v", err)
	}
}

func TestValidDuration(t *testing.T) {
	for s, want := range map[string]bool{
		"0s": true, "5m": true, "1h30m": true, "250ms": true, "2d": true, "1w": true,
		"": false, "5": false, "m": false, "5 m": false, "1.5h": false, "5mm": false, "-1m": false,
	} {
		if got := validDuration(s); got != want {
			t.Errorf("validDuration(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestAbsentCarriesTheScope: FaxgateAbsent, whose absent() keeps no label,
// carries the selector's equality matchers and the namespace as labels of
// its own, so it is routed like the release's other alerts; a regex
// matcher adds nothing.
func TestAbsentCarriesTheScope(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want map[string]string
	}{
		{Options{}, map[string]string{"severity": "critical", "job": "faxgate"}},
		{Options{Selector: `job="fax-gw",env!="dev"`, Namespace: "payments"}, map[string]string{"severity": "critical", "job": "fax-gw", "namespace": "payments"}},
		{Options{Selector: `job=~"fax.*"`}, map[string]string{"severity": "critical"}},
	} {
		for _, r := range Rules(tc.opts).Groups[0].Rules {
			if r.Alert == "FaxgateAbsent" && !maps.Equal(r.Labels, tc.want) {
				t.Errorf("%+v: FaxgateAbsent labels %v, want %v", tc.opts, r.Labels, tc.want)
			}
			if r.Alert == "FaxgateDown" && len(r.Labels) != 1 {
				t.Errorf("%+v: FaxgateDown labels %v: only FaxgateAbsent gets static scope labels", tc.opts, r.Labels)
			}
		}
	}
}
