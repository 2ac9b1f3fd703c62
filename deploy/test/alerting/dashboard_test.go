//go:build alerting

package alerting

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// mainPanels are the dashboard panels (by title) that must show data after
// the soak's traffic; each must exist in the dashboard. Keep this list in
// step with deploy/grafana/faxgate.json.
var mainPanels = []string{
	"Ready replicas",
	"Scrape up, per pod",
	"Memory per pod",
	"CPU per pod",
	"Budget spent, by caller and limit",
	"Budget used, by limit and route",
	"Token expires in",
	"Configuration",
	"Requests by caller",
	"Requests by route",
	"Requests in flight",
	"Denied by reason",
	"Share rate limited, by caller",
	"Gateway latency",
	"Upstream latency, uploads aside",
	"Upstream latency of uploads",
	"Token renewals per hour",
	"Vendor 429s by route",
	"Token store errors by op",
}

// dashboardStep is the range queries' step; Grafana's $__interval for it.
const dashboardStep = 5 * time.Second

// panel is a dashboard panel, rows' nested panels included.
type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr    string `json:"expr"`
		Instant bool   `json:"instant"`
		RefID   string `json:"refId"`
	} `json:"targets"`
}

// dashboardVars is what the test fills each template variable with: a
// regex matching the test's values, as Grafana sends a multi-value
// selection. The series carry no cluster label (cluster is an external label
// of the test's one Prometheus, as on a cluster without Thanos), so $cluster
// also matches none.
func dashboardVars(releases []*release, from, to time.Time) map[string]string {
	var ns, jobs []string
	for _, r := range releases {
		ns, jobs = append(ns, r.namespace), append(jobs, r.fullname)
	}
	interval := dashboardStep
	scrape := time.Second
	rate := max(interval+scrape, 4*scrape)
	rng := to.Sub(from).Truncate(time.Second)
	return map[string]string{
		"datasource":      "prometheus",
		"cluster":         cluster + "|",
		"namespace":       strings.Join(ns, "|"),
		"job":             strings.Join(jobs, "|"),
		"caller":          "intake|sender|batch",
		"route":           "contacts.list|faxes.send",
		"__interval":      promDuration(interval),
		"__interval_ms":   fmt.Sprint(interval.Milliseconds()),
		"__rate_interval": promDuration(rate),
		"__range":         promDuration(rng),
		"__range_s":       fmt.Sprint(int64(rng.Seconds())),
		"__range_ms":      fmt.Sprint(rng.Milliseconds()),
	}
}

func promDuration(d time.Duration) string { return fmt.Sprintf("%ds", int64(d.Seconds())) }

// varRef is a Grafana variable reference: ${name}, ${name:format}, [[name]]
// or $name.
var varRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)`)

// expand fills in every variable of q, and fails on one it does not know.
func expand(q string, vars map[string]string) (string, error) {
	var unknown []string
	out := varRef.ReplaceAllStringFunc(q, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, name)
			return ref
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown variable(s) %v in %s", unknown, q)
	}
	return out, nil
}

// checkDashboard runs every query of deploy/grafana/faxgate.json, its
// template variables' label_values() included, on p over [from, to]: as a
// range query with dashboardStep and as an instant query at to. Every query
// must run without error; every panel of mainPanels must return data.
func checkDashboard(t *testing.T, p *promAPI, releases []*release, from, to time.Time) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy/grafana/faxgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	vars := dashboardVars(releases, from, to)

	// Template variables: label_values(selector, label) through the labels API.
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*(\w+)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := queryString(v.Query)
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q))
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
			continue
		}
		sel, err := expand(m[1], vars)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		var values []string
		err = p.get("/api/v1/label/"+m[2]+"/values", url.Values{
			"match[]": {sel}, "start": {fmt.Sprint(from.Unix())}, "end": {fmt.Sprint(to.Unix())},
		}, &values)
		switch {
		case err != nil:
			t.Errorf("variable %s: %s: %v", v.Name, q, err)
		case len(values) == 0 && v.Name != "cluster":
			t.Errorf("variable %s: %s returns no value", v.Name, sel)
		default:
			t.Logf("variable %s: %v", v.Name, values)
		}
	}

	hasData := map[string]bool{}
	titles := map[string]bool{}
	queries := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, pn := range ps {
			titles[pn.Title] = true
			for _, tg := range pn.Targets {
				if tg.Expr == "" {
					continue
				}
				q, err := expand(tg.Expr, vars)
				if err != nil {
					t.Errorf("panel %q: %v", pn.Title, err)
					continue
				}
				rng, err := p.queryRange(q, from, to, dashboardStep)
				if err != nil {
					t.Errorf("panel %q, range query %s: %v", pn.Title, q, err)
					continue
				}
				inst, err := p.query(q, to)
				if err != nil {
					t.Errorf("panel %q, instant query %s: %v", pn.Title, q, err)
					continue
				}
				queries++
				if len(rng) > 0 || len(inst) > 0 {
					hasData[pn.Title] = true
				}
			}
			walk(pn.Panels)
		}
	}
	walk(dash.Panels)
	if queries == 0 {
		t.Fatal("the dashboard has no query")
	}
	t.Logf("%d panel queries ran (range and instant), %d of %d panels with data", queries, len(hasData), len(titles))
	for _, title := range mainPanels {
		switch {
		case !titles[title]:
			t.Errorf("main panel %q is not in the dashboard: update mainPanels", title)
		case !hasData[title]:
			t.Errorf("main panel %q returns no data after the soak", title)
		}
	}
}

// queryString is a variable's query, which Grafana stores as a string or as
// {"query": "..."}.
func queryString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Query
}
