// Package mixin is the one source of faxgate's Prometheus alert rules and its
// Grafana dashboard (docs/metrics-and-alerts.md). Both are Go values built
// from the same selector and the same thresholds, so that a panel draws the
// line its alert fires at, and a different Prometheus job is one option, not
// a search-and-replace. cmd/faxgate-mixin writes them out; the shipped files
// under deploy/prometheus, deploy/grafana and the Helm chart are its output
// with the default options, and a test fails while they are stale.
//
// It is plain Go with no dependency beyond YAML: the rules are a short list
// of structs, and the dashboard is the handful of panel shapes Grafana's JSON
// model needs. A builder library (grafana-foundation-sdk) or a jsonnet
// mixin would add a dependency or a second language for what fits in three
// files.
package mixin

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// DefaultSelector is the label matcher every rule and every variable query
// selects faxgate's series with, unless Options say otherwise. The Helm chart
// renders the rules with its own release's job (the metrics Service's name).
const DefaultSelector = `job="faxgate"`

// DefaultRunbookBaseURL is where each alert's runbook_url points, plus "#"
// and the alert's heading anchor.
const DefaultRunbookBaseURL = "https://github.com/faxgate/faxgate/blob/main/docs/runbook.md"

// Options shape the generated rules. The zero value gives the shipped files.
type Options struct {
	// Selector is one or more comma-separated label matchers, e.g.
	// `job="payments-faxgate"`; default DefaultSelector.
	Selector string
	// Namespace, when set, is the namespace the selected targets run in:
	// every selector matches it too, so that two releases of one job name
	// in two namespaces never see each other's series. FaxgateAbsent
	// carries the selector's equality matchers (job, namespace) as labels
	// of its own, to be routed like the release's other alerts.
	Namespace string
	// RefreshBefore is the release's token.refresh_before; the token
	// alerts' thresholds are shares of it. Default 1h, faxgate's.
	RefreshBefore time.Duration
	// ChartSource leaves thresholdMark in each expression and writes the
	// default threshold beside it, for the Helm chart to put its own
	// release's threshold in (the shipped rules have the numbers).
	ChartSource bool
	Overrides
}

// Overrides are the per-alert changes an operator makes without forking the
// rules. Their YAML shape is the Helm chart's prometheusRule values, so one
// values file serves both.
type Overrides struct {
	// Alerts maps an alert name to its changes.
	Alerts map[string]AlertOverride `yaml:"alerts" json:"alerts"`
	// AdditionalRuleLabels go on every alert (an alert's own Labels, and its
	// Severity, win over them).
	AdditionalRuleLabels map[string]string `yaml:"additionalRuleLabels" json:"additionalRuleLabels"`
	// RunbookBaseURL replaces DefaultRunbookBaseURL in every runbook_url.
	RunbookBaseURL string `yaml:"runbookBaseURL" json:"runbookBaseURL"`
}

// AlertOverride changes one alert. Empty fields change nothing.
type AlertOverride struct {
	// Enabled false drops the alert.
	Enabled *bool `yaml:"enabled" json:"enabled"`
	// Severity replaces the severity label.
	Severity string `yaml:"severity" json:"severity"`
	// For replaces the alert's for: duration ("0s" fires at once).
	For string `yaml:"for" json:"for"`
	// Labels are added to the alert's labels.
	Labels map[string]string `yaml:"labels" json:"labels"`
	// Threshold replaces the number the alert fires at, in the alert's own
	// unit (docs/metrics-and-alerts.md lists them).
	Threshold *float64 `yaml:"threshold" json:"threshold"`
}

// Severities are the values an alert's severity label takes: critical pages,
// warning is degraded service, info is caller behaviour and never pages.
var severities = []string{"critical", "warning", "info"}

// Validate reports every override that names no alert or gives a value the
// rules cannot take, so that a typo in an alert's name is an error, not a
// silently ignored setting.
func (o Options) Validate() error {
	known := map[string]bool{}
	thresholds := map[string]bool{}
	for _, a := range alerts(sel{}) {
		known[a.Name] = true
		thresholds[a.Name] = a.Unit != ""
	}
	var problems []string
	names := make([]string, 0, len(o.Alerts))
	for name := range o.Alerts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ov := o.Alerts[name]
		if !known[name] {
			problems = append(problems, fmt.Sprintf("alerts.%s: no such alert", name))
		}
		if ov.Severity != "" && !contains(severities, ov.Severity) {
			problems = append(problems, fmt.Sprintf("alerts.%s.severity: %q is not one of %s", name, ov.Severity, strings.Join(severities, ", ")))
		}
		if ov.Threshold != nil && known[name] && !thresholds[name] {
			problems = append(problems, fmt.Sprintf("alerts.%s.threshold: the alert has no threshold", name))
		}
		if ov.Threshold != nil && *ov.Threshold < 0 {
			problems = append(problems, fmt.Sprintf("alerts.%s.threshold: %g is negative", name, *ov.Threshold))
		}
		if ov.For != "" && !validDuration(ov.For) {
			problems = append(problems, fmt.Sprintf("alerts.%s.for: %q is not a Prometheus duration such as 5m or 1h30m", name, ov.For))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// validDuration accepts Prometheus' duration syntax: one or more number and
// unit pairs, units ms, s, m, h, d, w, y.
func validDuration(s string) bool {
	if s == "" {
		return false
	}
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			return false
		}
		s = s[i:]
		switch {
		case strings.HasPrefix(s, "ms"):
			s = s[2:]
		case s != "" && strings.ContainsRune("smhdwy", rune(s[0])):
			s = s[1:]
		default:
			return false
		}
	}
	return true
}

// equalities are the label="value" matchers of a selector, which every
// series it selects carries.
func equalities(selector string) map[string]string {
	out := map[string]string{}
	for _, m := range strings.Split(selector, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(m), "=")
		if !ok || strings.ContainsAny(name, "!~ ") || strings.HasPrefix(value, "~") || len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
			continue
		}
		out[name] = value[1 : len(value)-1]
	}
	return out
}

// sel writes faxgate's series selectors: the configured matcher, after any
// matchers of the query's own.
type sel struct{ matcher string }

func newSel(selector string) sel {
	if selector == "" {
		selector = DefaultSelector
	}
	return sel{matcher: selector}
}

// selector is o's selector with its namespace matcher, if any.
func (o Options) selector() string {
	s := o.Selector
	if s == "" {
		s = DefaultSelector
	}
	if o.Namespace != "" {
		s += fmt.Sprintf(",namespace=%q", o.Namespace)
	}
	return s
}

// m is metric{extra...,selector}.
func (s sel) m(metric string, extra ...string) string {
	return metric + "{" + strings.Join(append(extra, s.matcher), ",") + "}"
}
