package deploytest

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// The default rules of Grafana's dashboard linter
// (github.com/grafana/dashboard-linter, whose module the Go proxy here does
// not serve), as tests over the generated dashboard, plus the project's own:
// every query filters on cluster, namespace and job; one unit per panel; no
// increase() over a window that changes meaning with the zoom. A rule the
// linter's .lint file beside the dashboard excludes is skipped here only if
// it gives a reason.

type lintDashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []lintVariable `json:"list"`
	} `json:"templating"`
	Panels []lintPanel `json:"panels"`
}

type lintVariable struct {
	Name       string          `json:"name"`
	Label      string          `json:"label"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Multi    bool   `json:"multi"`
	AllValue string `json:"allValue"`
	Refresh  int    `json:"refresh"`
}

type lintPanel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
		Overrides []struct {
			Properties []struct {
				ID string `json:"id"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func readDashboard(t *testing.T, path string) lintDashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d lintDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// lintExclusions are the rules deploy/grafana/.lint excludes, each with its
// reason.
func lintExclusions(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(repoRoot + "/deploy/grafana/.lint")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Exclusions map[string]struct {
			Reason string `json:"reason"`
		} `json:"exclusions"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rule, e := range f.Exclusions {
		if strings.TrimSpace(e.Reason) == "" {
			t.Errorf(".lint excludes %s without a reason", rule)
		}
		out[rule] = e.Reason
	}
	return out
}

// rateIntervalStandIn is what the linter reads $__rate_interval as: a
// duration no one writes by hand, so a range equal to it is the variable.
const rateIntervalStandIn = 8869 * time.Millisecond

// lintExpr parses a target's query as the linter does: Grafana's interval
// variables become durations (label values such as "$job" stay strings).
func lintExpr(expr string) (parser.Expr, error) {
	r := strings.NewReplacer("$__rate_interval", "8869ms", "${__rate_interval}", "8869ms",
		"$__interval", "4867ms", "${__interval}", "4867ms", "$__range", "11111s", "${__range}", "11111s")
	return parser.NewParser(parser.Options{}).ParseExpr(r.Replace(expr))
}

// lint returns every finding of the rules on d, by rule.
func lint(d lintDashboard, excluded map[string]string) map[string][]string {
	found := map[string][]string{}
	add := func(rule, format string, args ...any) {
		if _, ok := excluded[rule]; !ok {
			found[rule] = append(found[rule], fmt.Sprintf(format, args...))
		}
	}
	var dsVar *lintVariable
	for i, v := range d.Templating.List {
		if v.Type == "datasource" {
			dsVar = &d.Templating.List[i]
		}
	}
	// template-datasource-rule
	switch {
	case dsVar == nil:
		add("template-datasource-rule", "no templated data source")
	case dsVar.Name != "datasource" && dsVar.Name != "prometheus_datasource":
		add("template-datasource-rule", "data source variable named %q, want datasource", dsVar.Name)
	case dsVar.Label != "Data source" && dsVar.Label != "Prometheus data source":
		add("template-datasource-rule", "data source variable labelled %q, want Data source", dsVar.Label)
	}
	dsUIDs := map[string]bool{}
	if dsVar != nil {
		dsUIDs["$"+dsVar.Name], dsUIDs["${"+dsVar.Name+"}"] = true, true
	}
	// template-job-rule, template-instance-rule
	for _, name := range []string{"job", "instance"} {
		rule := "template-" + name + "-rule"
		i := slices.IndexFunc(d.Templating.List, func(v lintVariable) bool { return v.Name == name })
		if i < 0 {
			add(rule, "no %s variable", name)
			continue
		}
		v := d.Templating.List[i]
		if v.Datasource == nil || !dsUIDs[v.Datasource.UID] {
			add(rule, "%s variable does not use the data source variable", name)
		}
		if v.Type != "query" {
			add(rule, "%s variable is a %s, want a query", name, v.Type)
		}
		if want := strings.ToUpper(name[:1]) + name[1:]; v.Label != want {
			add(rule, "%s variable labelled %q, want %q", name, v.Label, want)
		}
		if !v.Multi {
			add(rule, "%s variable is not multi-select", name)
		}
		if v.AllValue != ".+" {
			add(rule, "%s variable's allValue is %q, want .+", name, v.AllValue)
		}
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		// panel-datasource-rule
		if p.Datasource == nil || !dsUIDs[p.Datasource.UID] {
			add("panel-datasource-rule", "%s does not use the data source variable", where)
		}
		// panel-title-description-rule
		if strings.TrimSpace(p.Title) == "" || strings.TrimSpace(p.Description) == "" {
			add("panel-title-description-rule", "%s has no title or no description", where)
		}
		// panel-units-rule, and one unit per panel
		if !slices.Contains(grafanaUnits, p.FieldConfig.Defaults.Unit) {
			add("panel-units-rule", "%s has unit %q, not one of Grafana's", where, p.FieldConfig.Defaults.Unit)
		}
		for _, o := range p.FieldConfig.Overrides {
			for _, prop := range o.Properties {
				if prop.ID == "unit" {
					add("one-unit-per-panel", "%s overrides the unit of some series", where)
				}
			}
		}
		if len(p.Targets) == 0 {
			add("target-promql-rule", "%s has no query", where)
		}
		for _, tg := range p.Targets {
			where := where + " target " + tg.RefID
			// target-promql-rule
			expr, err := lintExpr(tg.Expr)
			if err != nil {
				add("target-promql-rule", "%s: %v", where, err)
				continue
			}
			for _, sel := range parser.ExtractSelectors(expr) {
				// target-job-rule, target-instance-rule, and the
				// release filter every query carries
				for _, m := range []struct{ rule, name string }{
					{"target-job-rule", "job"}, {"target-instance-rule", "instance"},
					{"release-filter", "namespace"}, {"release-filter", "cluster"},
				} {
					if !hasMatcher(sel, m.name, labels.MatchRegexp, "$"+m.name) {
						add(m.rule, "%s: a selector lacks %s=~\"$%s\": %s", where, m.name, m.name, tg.Expr)
					}
				}
			}
			parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
				ms, ok := n.(*parser.MatrixSelector)
				if !ok || len(path) == 0 {
					return nil
				}
				call, ok := path[len(path)-1].(*parser.Call)
				if !ok {
					return nil
				}
				// target-rate-interval-rule
				if (call.Func.Name == "rate" || call.Func.Name == "irate") && ms.Range != rateIntervalStandIn {
					add("target-rate-interval-rule", "%s: %s does not use $__rate_interval: %s", where, call.Func.Name, tg.Expr)
				}
				// increase() over a window that follows the zoom
				if call.Func.Name == "increase" && (ms.Range == rateIntervalStandIn || ms.Range == 4867*time.Millisecond || ms.Range == 11111*time.Second) {
					add("fixed-increase-window", "%s: increase over a window that changes with the zoom: %s", where, tg.Expr)
				}
				return nil
			})
		}
	}
	return found
}

func hasMatcher(sel []*labels.Matcher, name string, typ labels.MatchType, value string) bool {
	for _, m := range sel {
		if m.Name == name && m.Type == typ && m.Value == value {
			return true
		}
	}
	return false
}

// TestDashboardPassesTheLinterRules: the shipped dashboard has no finding,
// and the rules find what they exist for (each seeded fault in a copy is
// found), so a rule that checks nothing fails here.
func TestDashboardPassesTheLinterRules(t *testing.T) {
	excluded := lintExclusions(t)
	for rule := range excluded {
		if rule != "template-instance-rule" && rule != "target-instance-rule" {
			t.Errorf(".lint excludes %s: only the instance rules may be excluded", rule)
		}
	}
	d := readDashboard(t, dashboardFile)
	for rule, findings := range lint(d, excluded) {
		for _, f := range findings {
			t.Errorf("%s: %s", rule, f)
		}
	}
	if n := len(d.Panels); n < 20 {
		t.Errorf("%d panels; the dashboard lost some", n)
	}

	// Each fault below, seeded into a copy, is found by its rule: in the
	// first graph whose first query is a rate() (the rate faults need one).
	firstQuery := func(d *lintDashboard) (*lintPanel, int) {
		for i := range d.Panels {
			if d.Panels[i].Type == "timeseries" && len(d.Panels[i].Targets) > 0 && strings.Contains(d.Panels[i].Targets[0].Expr, "(rate(") {
				return &d.Panels[i], i
			}
		}
		t.Fatal("no timeseries panel")
		return nil, 0
	}
	for _, tc := range []struct {
		rule  string
		fault func(d *lintDashboard)
	}{
		{"template-datasource-rule", func(d *lintDashboard) { d.Templating.List[0].Name = "ds" }},
		{"template-job-rule", func(d *lintDashboard) {
			for i := range d.Templating.List {
				if d.Templating.List[i].Name == "job" {
					d.Templating.List[i].AllValue = ".*"
				}
			}
		}},
		{"template-instance-rule", func(d *lintDashboard) {}},
		{"panel-datasource-rule", func(d *lintDashboard) { p, _ := firstQuery(d); p.Datasource.UID = "prometheus" }},
		{"panel-title-description-rule", func(d *lintDashboard) { p, _ := firstQuery(d); p.Description = "" }},
		{"panel-units-rule", func(d *lintDashboard) { p, _ := firstQuery(d); p.FieldConfig.Defaults.Unit = "" }},
		{"target-promql-rule", func(d *lintDashboard) { p, _ := firstQuery(d); p.Targets[0].Expr = "sum(rate(x[$__rate_interval])" }},
		{"target-rate-interval-rule", func(d *lintDashboard) {
			p, _ := firstQuery(d)
			p.Targets[0].Expr = strings.Replace(p.Targets[0].Expr, "$__rate_interval", "5m", 1)
		}},
		{"target-job-rule", func(d *lintDashboard) {
			p, _ := firstQuery(d)
			p.Targets[0].Expr = strings.Replace(p.Targets[0].Expr, `,job=~"$job"`, "", 1)
		}},
		{"release-filter", func(d *lintDashboard) {
			p, _ := firstQuery(d)
			p.Targets[0].Expr = strings.Replace(p.Targets[0].Expr, `namespace=~"$namespace",`, "", 1)
		}},
		{"fixed-increase-window", func(d *lintDashboard) {
			p, _ := firstQuery(d)
			p.Targets[0].Expr = strings.Replace(p.Targets[0].Expr, "rate(", "increase(", 1)
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			d := readDashboard(t, dashboardFile)
			tc.fault(&d)
			if tc.rule == "template-instance-rule" {
				// Excluded with a reason; without the exclusion it finds
				// the missing variable.
				excluded = map[string]string{}
			}
			if got := lint(d, excluded)[tc.rule]; len(got) == 0 {
				t.Errorf("the seeded fault was not found by %s", tc.rule)
			}
			excluded = lintExclusions(t)
		})
	}
}

// TestDashboardThresholdsAreTheAlerts: a panel that names an alert in its
// description draws that alert's threshold, from the same source: the
// number in the alert's expression is among the panel's threshold steps.
func TestDashboardThresholdsAreTheAlerts(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type thresholdPanel struct {
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				Thresholds *struct {
					Steps []struct {
						Value *float64 `json:"value"`
					} `json:"steps"`
				} `json:"thresholds"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
	}
	var d struct {
		Panels []thresholdPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	rules := map[string]string{}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = r.Expr
		}
	}
	// panel title → the alert whose threshold it draws
	for title, alert := range map[string]string{
		"Token expires in":                "FaxgateTokenRenewalOverdue",
		"Share answered 5xx, by route":    "FaxgateUpstreamErrors",
		"Share rate limited, by caller":   "FaxgateCallerRateLimited",
		"Upstream latency, uploads aside": "FaxgateUpstreamSlow",
		"Budget used, by limit and route": "FaxgateUpstreamBudgetNearlySpent",
		"Hold left, by route":             "FaxgateUpstreamThrottled",
	} {
		i := slices.IndexFunc(d.Panels, func(p thresholdPanel) bool { return p.Title == title })
		if i < 0 {
			t.Errorf("no panel %q", title)
			continue
		}
		th := d.Panels[i].FieldConfig.Defaults.Thresholds
		if th == nil {
			t.Errorf("panel %q has no thresholds", title)
			continue
		}
		found := false
		for _, s := range th.Steps {
			if s.Value != nil && regexp.MustCompile(`[<>] `+regexp.QuoteMeta(fmt.Sprint(*s.Value))+`\b`).MatchString(rules[alert]) {
				found = true
			}
		}
		if !found {
			t.Errorf("panel %q: no threshold step is %s's threshold (%s)", title, alert, rules[alert])
		}
	}
}

// grafanaUnits are the unit ids Grafana knows (its valueFormats
// categories), as the linter lists them; the dashboard uses a few.
var grafanaUnits = []string{
	"none", "short", "percent", "percentunit", "bytes", "decbytes", "bits", "Bps", "bps",
	"ns", "µs", "ms", "s", "m", "h", "d", "dtdurationms", "dtdurations", "dthms", "dtdhms",
	"cps", "ops", "reqps", "rps", "wps", "iops", "cpm", "opm", "rpm", "wpm",
	"bool", "bool_yes_no", "bool_on_off", "dateTimeAsIso", "dateTimeFromNow",
}
