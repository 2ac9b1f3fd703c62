package deploytest

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

const (
	rulesFile     = repoRoot + "/deploy/prometheus/faxgate-rules.yaml"
	rulesTestFile = repoRoot + "/deploy/prometheus/faxgate-rules_test.yaml"
	dashboardFile = repoRoot + "/deploy/grafana/faxgate.json"
	runbookFile   = repoRoot + "/docs/runbook.md"
	runbookBase   = "https://github.com/faxgate/faxgate/blob/main/docs/runbook.md#"
)

func TestRulesPassPromtoolCheck(t *testing.T) {
	out, err := run(t, ".", tool(t, "promtool"), "check", "rules", rulesFile)
	if err != nil || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestRulesPassPromtoolUnitTests(t *testing.T) {
	out, err := run(t, repoRoot+"/deploy/prometheus", tool(t, "promtool"), "test", "rules", "faxgate-rules_test.yaml")
	if err != nil || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

// TestEveryAlertIsDocumentedAndProven: every alert follows the mixin
// conventions, its runbook_url points at a heading of docs/runbook.md, and
// the promtool tests have a case where it fires and one where it stays silent.
func TestEveryAlertIsDocumentedAndProven(t *testing.T) {
	var tests struct {
		Tests []struct {
			Name           string `json:"name"`
			AlertRuleTests []struct {
				Alertname string            `json:"alertname"`
				ExpAlerts []json.RawMessage `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTests {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	anchors := runbookAnchors(t)
	n := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if sev := r.Labels["severity"]; sev != "info" && sev != "warning" && sev != "critical" {
				t.Errorf("%s: severity %q, want info, warning or critical", r.Alert, sev)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s", r.Alert, a)
				}
			}
			if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !anchors[strings.ToLower(r.Alert)] {
				t.Errorf("%s: docs/runbook.md has no heading %q for its runbook_url", r.Alert, r.Alert)
			}
			if !fires[r.Alert] {
				t.Errorf("%s: no promtool case where it fires", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("%s: no promtool case where it stays silent", r.Alert)
			}
		}
	}
	if n < 15 {
		t.Errorf("%d alerts; the rules file lost some", n)
	}
}

// runbookAnchors are the GitHub anchors of docs/runbook.md's headings.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return anchors
}

// queries are every PromQL expression deploy/ ships, by where it is, with
// Grafana's variables replaced by values a query may hold.
func queries(t *testing.T) map[string]string {
	t.Helper()
	q := map[string]string{}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			q["rule "+r.Alert+r.Record] = r.Expr
		}
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type string
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$__range", "6h", "$__interval", "1m",
		"$caller", "intake", "$route", "contacts.list")
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %d: empty expr", p.Title, i)
			}
			q["panel "+p.Title+" #"+string(rune('A'+i))] = grafana.Replace(tg.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((\w+(?:\{[^}]*\})?), *(\w+)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		q["variable "+v.Name] = m[1]
	}
	return q
}

// TestQueriesNameOnlyFaxgateMetrics parses every query with the Prometheus
// parser and checks each metric it names against what a running gateway
// registers, and each label it matches on or groups by against that metric's
// labels: a renamed metric or label fails here, not on a blank dashboard.
func TestQueriesNameOnlyFaxgateMetrics(t *testing.T) {
	exported := gatewayMetricNames(t)
	p := parser.NewParser(parser.Options{})
	for where, q := range queries(t) {
		expr, err := p.ParseExpr(q)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, q)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			switch n := n.(type) {
			case *parser.VectorSelector:
				if n.Name == "up" {
					return nil // the scrape's own series
				}
				labels, ok := exported[n.Name]
				if !ok {
					t.Errorf("%s: %s is not a metric faxgate exports", where, n.Name)
					return nil
				}
				for _, m := range n.LabelMatchers {
					if m.Name != "__name__" && !labels[m.Name] {
						t.Errorf("%s: %s has no label %q (it has %v)", where, n.Name, m.Name, sortedKeys(labels))
					}
				}
			case *parser.AggregateExpr:
				// A grouping label must be one that some metric under the
				// aggregation carries.
				under := map[string]bool{}
				parser.Inspect(n.Expr, func(m parser.Node, _ []parser.Node) error {
					if vs, ok := m.(*parser.VectorSelector); ok {
						for l := range exported[vs.Name] {
							under[l] = true
						}
						if vs.Name == "up" {
							for _, l := range scrapeLabels {
								under[l] = true
							}
						}
					}
					return nil
				})
				for _, l := range n.Grouping {
					if !under[l] {
						t.Errorf("%s: %s by %q, a label no metric under it has (%v)", where, n.Op, l, sortedKeys(under))
					}
				}
			}
			return nil
		})
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// scrapeLabels are the labels a scrape adds to every series: job and
// instance, the target labels of the chart's ServiceMonitor (namespace, pod),
// and cluster, which a shared Prometheus may add as a target label. The
// alerts keep them (docs/metrics-and-alerts.md).
var scrapeLabels = []string{"job", "instance", "namespace", "pod", "cluster"}

// gatewayMetricNames are the series names a running gateway can expose,
// each with the label names its series carry: every family its registry
// gathers, and every descriptor of its metrics (a vector with no children
// yet gathers nothing), with a histogram's _bucket (plus le), _sum and
// _count. The scrapeLabels belong to every series.
func gatewayMetricNames(t *testing.T) map[string]map[string]bool {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
callers:
  unidentified: intake
  list:
    - {name: intake, cidrs: ["127.0.0.0/8"], allow: ["*"]}
`})
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`)
	if resp.StatusCode != 200 {
		t.Fatalf("gateway answered %d: %s", resp.StatusCode, body)
	}
	// A hold makes faxgate_upstream_hold_seconds, which exists from a
	// route's first hold on, part of the scrape.
	g.Gateway.Holds.Hold("contacts.list", time.Second)
	names := map[string]map[string]bool{}
	add := func(name string, labels ...string) {
		if names[name] == nil {
			names[name] = map[string]bool{}
			for _, l := range scrapeLabels {
				names[name][l] = true
			}
		}
		for _, l := range labels {
			names[name][l] = true
		}
	}
	histograms := map[string]bool{}
	mfs, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// What faxgate serve registers beside the gateway's own: the Go
	// runtime's and the process's collectors (memory and CPU per pod).
	runtimeReg := prometheus.NewRegistry()
	runtimeReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rmfs, err := runtimeReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	mfs = append(mfs, rmfs...)
	for _, mf := range mfs {
		add(mf.GetName())
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				add(mf.GetName(), lp.GetName())
			}
		}
		if mf.GetType().String() == "HISTOGRAM" {
			histograms[mf.GetName()] = true
		}
	}
	desc := regexp.MustCompile(`fqName: "([^"]+)".*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)
	// The gateway's Metrics holds its own collectors and, one level down,
	// each part's (proxy, tokencache, policy/limit, servertls).
	var parts []prometheus.Collector
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if !f.CanInterface() {
				continue
			}
			if c, ok := f.Interface().(prometheus.Collector); ok {
				parts = append(parts, c)
			} else if f.Kind() == reflect.Pointer && !f.IsNil() && f.Elem().Kind() == reflect.Struct {
				walk(f.Elem())
			}
		}
	}
	walk(reflect.ValueOf(g.Metrics).Elem())
	for _, c := range parts {
		ch := make(chan *prometheus.Desc, 4)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			sm := desc.FindStringSubmatch(d.String())
			if sm == nil {
				t.Fatalf("cannot read descriptor %s", d)
			}
			add(sm[1])
			for _, l := range strings.Split(sm[2], ",") {
				if name, _, ok := strings.Cut(l, "="); ok {
					add(sm[1], name)
				}
			}
			for _, l := range strings.Split(sm[3], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					add(sm[1], l)
				}
			}
			if _, isHist := c.(*prometheus.HistogramVec); isHist {
				histograms[sm[1]] = true
			}
		}
	}
	for h := range histograms {
		labels := sortedKeys(names[h])
		add(h+"_bucket", append(labels, "le")...)
		add(h+"_sum", labels...)
		add(h+"_count", labels...)
	}
	var faxgate []string
	for n := range names {
		if strings.HasPrefix(n, "faxgate_") {
			faxgate = append(faxgate, n)
		}
	}
	sort.Strings(faxgate)
	for _, want := range []string{"faxgate_requests_total", "faxgate_ready", "faxgate_upstream_duration_seconds_bucket", "faxgate_denied_total"} {
		if !slices.Contains(faxgate, want) {
			t.Fatalf("the running gateway's names lack %s: %v", want, faxgate)
		}
	}
	for metric, label := range map[string]string{"faxgate_requests_total": "code", "faxgate_denied_total": "reason",
		"faxgate_upstream_duration_seconds_bucket": "le", "faxgate_token_store_errors_total": "op"} {
		if !names[metric][label] {
			t.Fatalf("the running gateway's %s lacks label %s: %v", metric, label, sortedKeys(names[metric]))
		}
	}
	return names
}
