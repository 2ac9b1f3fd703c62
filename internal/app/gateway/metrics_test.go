package gateway_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// documentedMetrics is the table of docs/metrics-and-alerts.md, with each
// metric's type and labels. Every row must be registered by gateway.New: a
// metric that dashboards and alerts name is never optional.
var documentedMetrics = []struct {
	name   string
	typ    string // dto.MetricType name
	labels []string
}{
	{"faxgate_requests_total", "COUNTER", []string{"caller", "code", "method", "route"}},
	{"faxgate_request_duration_seconds", "HISTOGRAM", []string{"caller", "route"}},
	{"faxgate_upstream_duration_seconds", "HISTOGRAM", []string{"route"}},
	{"faxgate_denied_total", "COUNTER", []string{"caller", "reason", "route"}},
	{"faxgate_rate_limited_total", "COUNTER", []string{"caller"}},
	{"faxgate_token_refresh_total", "COUNTER", []string{"result"}},
	{"faxgate_token_expiry_timestamp_seconds", "GAUGE", nil},
	{"faxgate_upstream_401_retries_total", "COUNTER", []string{"route"}},
	{"faxgate_token_store_errors_total", "COUNTER", []string{"op"}},
	{"faxgate_inflight_requests", "GAUGE", nil},
	{"faxgate_build_info", "GAUGE", []string{"goversion", "revision", "version"}},
	{"faxgate_config_reload_total", "COUNTER", []string{"result"}},
	{"faxgate_config_last_reload_success_timestamp_seconds", "GAUGE", nil},
	{"faxgate_tls_certificate_expiry_timestamp_seconds", "GAUGE", []string{"domain"}},
	{"faxgate_tls_handshake_errors_total", "COUNTER", []string{"reason"}},
	{"faxgate_upstream_throttled_total", "COUNTER", []string{"route"}},
	{"faxgate_upstream_hold_seconds", "GAUGE", []string{"route"}},
	{"faxgate_upstream_ratelimit_remaining", "GAUGE", []string{"route"}},
	{"faxgate_upstream_budget_used_ratio", "GAUGE", []string{"limit", "route"}},
	{"faxgate_upstream_budget_used_ratio_timestamp_seconds", "GAUGE", []string{"limit", "route"}},
	{"faxgate_upstream_budget_spent_total", "COUNTER", []string{"caller", "limit"}},
	{"faxgate_upstream_budget_refused_total", "COUNTER", []string{"caller", "limit"}},
	{"faxgate_ready", "GAUGE", nil},
	{"faxgate_config_last_reload_successful", "GAUGE", nil},
	{"faxgate_background_panics_total", "COUNTER", []string{"loop"}},
	{"faxgate_redis_primary_changes_total", "COUNTER", nil},
	{"faxgate_upstream_401_unretried_total", "COUNTER", []string{"route"}},
	{"faxgate_upstream_retries_total", "COUNTER", []string{"reason", "route"}},
	{"faxgate_upstream_proxy_errors_total", "COUNTER", []string{"reason"}},
	{"faxgate_rate_limit_fallback_total", "COUNTER", []string{"caller"}},
	{"faxgate_rate_limit_backend_up", "GAUGE", nil},
	{"faxgate_config_restart_required", "GAUGE", nil},
	{"faxgate_token_adopted_total", "COUNTER", []string{"source"}},
	{"faxgate_token_lease_total", "COUNTER", []string{"result"}},
	{"faxgate_token_store_unsynced", "GAUGE", nil},
	{"faxgate_tls_acme_failures_total", "COUNTER", []string{"domain", "op"}},
	{"faxgate_upstream_budget_fallback_total", "COUNTER", nil},
	{"faxgate_upstream_budget_waiting", "GAUGE", nil},
	{"faxgate_upstream_budget_wait_seconds", "HISTOGRAM", []string{"caller"}},
	{"faxgate_upstream_budget_wait_evicted_total", "COUNTER", nil},
	{"faxgate_upstream_budget_max_wait_seconds", "GAUGE", nil},
	{"faxgate_upstream_budget_max_waiting", "GAUGE", nil},
	{"faxgate_shadow_decisions_total", "COUNTER", []string{"caller", "candidate", "live", "route"}},
	{"faxgate_shadow_skipped_total", "COUNTER", nil},
}

// TestMetricsMatchTheDocs: every documented metric is registered on the
// registry gateway.New builds, whichever package owns it, with the type and
// the label names docs/metrics-and-alerts.md gives it, and has help text.
func TestMetricsMatchTheDocs(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
callers:
  list:
    - name: intake
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
`})
	// Use every vector once so that it shows up in a scrape.
	m := g.Metrics
	m.Proxy.Requests.WithLabelValues("intake", "contacts.list", "POST", "200").Inc()
	m.Proxy.RequestDuration.WithLabelValues("intake", "contacts.list").Observe(0.01)
	m.Proxy.UpstreamDuration.WithLabelValues("contacts.list").Observe(0.01)
	m.Proxy.Denied.WithLabelValues("intake", "numbers.delete", "forbidden").Inc()
	m.Proxy.RateLimited.WithLabelValues("intake").Inc()
	m.Proxy.Upstream401Retries.WithLabelValues("contacts.create").Inc()
	m.Limits.UpstreamThrottled.WithLabelValues("contacts.list").Inc()
	m.Proxy.UpstreamRateLimitRemaining.WithLabelValues("contacts.list").Set(12)
	m.Limits.BudgetRefused.WithLabelValues("intake", "tenant").Inc()
	m.Tokens.StoreErrors.WithLabelValues("load").Inc()
	m.Limits.BudgetUsedRatio.WithLabelValues("tenant", "").Set(0.5)
	m.Limits.BudgetUsedAt.WithLabelValues("tenant", "").Set(1)
	m.Limits.BudgetSpent.WithLabelValues("intake", "tenant").Inc()
	m.TLS.CertExpiry.WithLabelValues("faxgate.example").Set(1)
	m.TLS.HandshakeErrors.WithLabelValues("protocol").Inc()
	m.Proxy.Upstream401Unretried.WithLabelValues("contacts.create").Inc()
	m.Proxy.UpstreamProxyErrors.WithLabelValues("unreachable").Inc() // its series start with a proxy configured
	m.Proxy.ShadowDecisions.WithLabelValues("intake", "contacts.list", "allowed", "rate_limited").Inc()
	m.Limits.RateLimitFallback.WithLabelValues("intake").Inc()
	m.Limits.RateLimitBackendUp.WithLabelValues().Set(1) // absent with backend: local
	m.Limits.BudgetWait.WithLabelValues("intake").Observe(0.5)
	m.Tokens.Adopted.WithLabelValues("redis").Inc()
	m.Tokens.Lease.WithLabelValues("acquired").Inc()
	m.TLS.ACMEFailures.WithLabelValues("faxgate.example", "renew").Inc()
	g.Gateway.Holds.Hold("contacts.list", 3*time.Second)

	mfs, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i, mf := range mfs {
		got[mf.GetName()] = i
	}
	for _, want := range documentedMetrics {
		t.Run(want.name, func(t *testing.T) {
			i, ok := got[want.name]
			if !ok {
				t.Fatal("not registered by gateway.New")
			}
			mf := mfs[i]
			if typ := mf.GetType().String(); typ != want.typ {
				t.Errorf("type = %s, want %s", typ, want.typ)
			}
			if strings.TrimSpace(mf.GetHelp()) == "" {
				t.Error("no help text")
			}
			for _, s := range mf.GetMetric() {
				var names []string
				for _, lp := range s.GetLabel() {
					names = append(names, lp.GetName())
				}
				if !slices.Equal(names, want.labels) { // Gather sorts label pairs by name
					t.Errorf("labels = %v, want %v", names, want.labels)
				}
			}
		})
	}
	// Others may be registered too: under the prefix, and linted below
	// (promhttp counts the errors of the /metrics handler itself).
	for name := range got {
		if !strings.HasPrefix(name, "faxgate_") && !strings.HasPrefix(name, "promhttp_") {
			t.Errorf("%s is registered without the faxgate_ prefix", name)
		}
	}
	problems, err := testutil.GatherAndLint(g.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestDocumentedMetricsAreTheDocsTable keeps documentedMetrics and the
// table of docs/metrics-and-alerts.md (its first column, between "##
// Metrics" and the next heading) the same list, so that a row added to
// either is checked against the registry above.
func TestDocumentedMetricsAreTheDocsTable(t *testing.T) {
	b, err := os.ReadFile("../../../docs/metrics-and-alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, ok := strings.Cut(string(b), "\n## Metrics\n")
	if !ok {
		t.Fatal(`no "## Metrics" heading`)
	}
	doc, _, _ = strings.Cut(doc, "\n#")
	name := regexp.MustCompile("`(faxgate_[a-z0-9_]+)`")
	var table []string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			table = append(table, m[1])
		}
	}
	var listed []string
	for _, m := range documentedMetrics {
		listed = append(listed, m.name)
	}
	slices.Sort(table)
	slices.Sort(listed)
	if len(table) < 40 {
		t.Fatalf("read %d metrics from the docs' table, want at least 40: %v", len(table), table)
	}
	if !slices.Equal(table, listed) {
		t.Errorf("the docs' table and documentedMetrics differ:\n docs: %v\n test: %v", table, listed)
	}
}
