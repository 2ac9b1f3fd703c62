package mixin

import (
	"bytes"
	"maps"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestShippedFilesAreCurrent: the rules and dashboard under deploy/ and in
// the Helm chart are this package's output with the default options, and
// the chart's schema for config is the one the configuration types make
// today. After changing the Go source (or a configuration type), run make
// mixin.
func TestShippedFilesAreCurrent(t *testing.T) {
	rules, err := Rules(Options{}).YAML("")
	if err != nil {
		t.Fatal(err)
	}
	chartRules, err := Rules(Options{ChartSource: true}).YAML("")
	if err != nil {
		t.Fatal(err)
	}
	dash, err := Dashboard().JSON()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := os.ReadFile("../helm/faxgate/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if schema, err = WithConfigSchema(schema); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{
		"../prometheus/faxgate-rules.yaml":         rules,
		"../helm/faxgate/files/faxgate-rules.yaml": chartRules,
		"../helm/faxgate/values.schema.json":       schema,
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
		{Options{Selector: `job="fax-gw",namespace="payments"`}, map[string]string{"severity": "critical", "job": "fax-gw", "namespace": "payments"}},
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

// TestNamespaceReachesEveryRule: with a namespace, every series selector
// matches it beside the job, so that two releases of one name in two
// namespaces never see each other's series; FaxgateAbsent's absent()
// names both.
func TestNamespaceReachesEveryRule(t *testing.T) {
	want := `job="faxgate",namespace="payments"`
	for _, r := range Rules(Options{Namespace: "payments"}).Groups[0].Rules {
		if got, all := strings.Count(r.Expr, want), strings.Count(r.Expr, "{"); got != all {
			t.Errorf("%s: %d of %d selectors match the namespace: %s", r.Alert, got, all, r.Expr)
		}
		if r.Alert == "FaxgateAbsent" && !strings.Contains(r.Expr, "absent(up{"+want+"})") {
			t.Errorf("FaxgateAbsent: %s", r.Expr)
		}
	}
}

// TestThresholds: every alert with a threshold has it written in, the
// token alerts' follow token.refresh_before, an override wins, and the
// chart's source keeps the mark with the default beside it.
func TestThresholds(t *testing.T) {
	rules := func(o Options) map[string]Rule {
		out := map[string]Rule{}
		for _, r := range Rules(o).Groups[0].Rules {
			out[r.Alert] = r
		}
		return out
	}
	def := rules(Options{})
	for name, r := range def {
		if strings.Contains(r.Expr, thresholdMark) || r.Threshold != nil {
			t.Errorf("%s: the shipped rule keeps the mark: %s", name, r.Expr)
		}
	}
	if e := def["FaxgateTokenRenewalOverdue"].Expr; !strings.HasSuffix(e, "< 2700") {
		t.Errorf("default overdue threshold: %s", e)
	}
	if e := def["FaxgateTokenExpiringSoon"].Expr; !strings.HasSuffix(e, "< 1800") {
		t.Errorf("default page threshold: %s", e)
	}
	short := rules(Options{RefreshBefore: 20 * time.Minute})
	if e := short["FaxgateTokenRenewalOverdue"].Expr; !strings.HasSuffix(e, "< 900") {
		t.Errorf("refresh_before 20m, overdue: %s", e)
	}
	if e := short["FaxgateTokenExpiringSoon"].Expr; !strings.HasSuffix(e, "< 600") {
		t.Errorf("refresh_before 20m, page: %s", e)
	}
	six, big := 0.25, 1500000.0
	o := Options{RefreshBefore: 20 * time.Minute, Overrides: Overrides{Alerts: map[string]AlertOverride{
		"FaxgateCertificateExpiryCritical": {Threshold: &six},
		"FaxgateTokenExpiringSoon":         {Threshold: &big},
	}}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	over := rules(o)
	if e := over["FaxgateCertificateExpiryCritical"].Expr; !strings.HasSuffix(e, "< 0.25 * 86400") {
		t.Errorf("overridden certificate threshold: %s", e)
	}
	if e := over["FaxgateTokenExpiringSoon"].Expr; !strings.HasSuffix(e, "< 1500000") {
		t.Errorf("an override wins over refresh_before, and is written without an exponent: %s", e)
	}
	chart := rules(Options{ChartSource: true})
	for _, a := range alerts(newSel("")) {
		r := chart[a.Name]
		if (a.Unit != "") != strings.Contains(r.Expr, thresholdMark) || (a.Unit != "") != (r.Threshold != nil) {
			t.Errorf("%s: chart source %q with threshold %v", a.Name, r.Expr, r.Threshold)
		}
	}
	if r := chart["FaxgateTokenExpiringSoon"]; r.ThresholdPerRefreshBefore != 0.5 || *r.Threshold != 1800 {
		t.Errorf("chart source of the page: %+v", r)
	}
}

// TestValidateThresholds: a threshold for an alert that has none, or a
// negative one, is refused.
func TestValidateThresholds(t *testing.T) {
	one, neg := 1.0, -1.0
	err := Options{Overrides: Overrides{Alerts: map[string]AlertOverride{
		"FaxgateAbsent": {Threshold: &one},
		"FaxgateDown":   {Threshold: &neg},
	}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "alerts.FaxgateAbsent.threshold: the alert has no threshold") ||
		!strings.Contains(err.Error(), "alerts.FaxgateDown.threshold: -1 is negative") {
		t.Errorf("got %v", err)
	}
}

// TestConfigSchemaCoversEveryKey: the schema names every key of the
// configuration types, refuses unknown ones at every level, and leaves the
// keys the chart owns to the chart.
func TestConfigSchemaCoversEveryKey(t *testing.T) {
	s := ConfigSchema()
	var walk func(path string, s map[string]any)
	n := 0
	walk = func(path string, s map[string]any) {
		if props, ok := s["properties"].(map[string]any); ok {
			if s["additionalProperties"] != false {
				t.Errorf("%s: unknown keys allowed", path)
			}
			for k, v := range props {
				n++
				walk(join(path, k), v.(map[string]any))
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
	}
	walk("", s)
	// The sections and some keys of later sections, by name.
	for _, want := range []string{"tracing", "upstream_budget", "admin"} {
		if _, ok := s["properties"].(map[string]any)[want]; !ok {
			t.Errorf("no %s", want)
		}
	}
	if n < 80 {
		t.Errorf("only %d keys", n)
	}
	listen := s["properties"].(map[string]any)["server"].(map[string]any)["properties"].(map[string]any)["listen"].(map[string]any)
	if !strings.Contains(listen["const"].(string), "remove server.listen from config") {
		t.Errorf("server.listen: %v", listen)
	}
}

// TestShadowConfigSchema: shadowConfig takes each section a candidate brings
// with config's own schema for it, requires none, and refuses every other
// section of faxgate's configuration, and an unknown key, with the reason.
func TestShadowConfigSchema(t *testing.T) {
	s := ShadowConfigSchema()
	if s["additionalProperties"] != false || s["required"] != nil {
		t.Errorf("additionalProperties %v, required %v", s["additionalProperties"], s["required"])
	}
	props := s["properties"].(map[string]any)
	live := ConfigSchema()["properties"].(map[string]any)
	if len(props) != len(live) {
		t.Errorf("%d sections, config has %d", len(props), len(live))
	}
	candidate := 0
	for name, ps := range props {
		p := ps.(map[string]any)
		msg, refused := p["const"].(string)
		switch name {
		case "callers", "policy", "routes", "rate_limit", "upstream_budget":
			candidate++
			if refused || !reflect.DeepEqual(p, live[name]) {
				t.Errorf("%s: %v, want config's schema of it", name, p)
			}
		default:
			if !refused || !strings.Contains(msg, "remove "+name+" from shadowConfig") ||
				!strings.Contains(msg, "callers, policy, routes, rate_limit and upstream_budget") {
				t.Errorf("%s: %v, want it refused with the candidate's sections named", name, p)
			}
		}
	}
	if candidate != 5 {
		t.Errorf("%d candidate sections, want 5", candidate)
	}
}
