package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// startSeriesConfig has two callers (intake may not delete numbers, billing
// may, with confirmation), one extra route and one upstream_budget limit.
const startSeriesConfig = `
callers:
  list:
    - name: intake
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
    - name: billing
      cidrs: ["10.9.0.0/16"]
      allow: ["numbers.delete"]
routes:
  extra:
    - {name: faxes.send, method: POST, path: /v1/faxes/send}
upstream_budget:
  limits:
    - {name: tenant, scope: tenant, requests: 100, per: 1m}
`

// startSeries are the counters an alert or a dashboard panel selects whose
// label values come from the config (docs/metrics-and-alerts.md, Series from
// the start).
var startSeries = []string{"faxgate_denied_total", "faxgate_rate_limited_total",
	"faxgate_upstream_throttled_total", "faxgate_upstream_401_retries_total",
	"faxgate_upstream_budget_refused_total"}

// TestSeriesFromTheStart pins, as golden exposition text, the series a
// gateway exports at 0 before its first request: for the callers (and
// unidentified), the routes (built-in but auth, extra, unmatched), the
// sensitive numbers.delete with the reason policy gives each caller there,
// and the budget's limits. A series born at 1 shows no increase(), so an
// alert meant to fire on one event would miss it.
func TestSeriesFromTheStart(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: startSeriesConfig})
	if err := testutil.GatherAndCompare(g.Registry, strings.NewReader(startGolden), startSeries...); err != nil {
		t.Fatal(err)
	}
}

const startGolden = `
# HELP faxgate_denied_total Requests refused by the gateway, by caller, route and error code.
# TYPE faxgate_denied_total counter
faxgate_denied_total{caller="billing",reason="confirmation_required",route="numbers.delete"} 0
faxgate_denied_total{caller="intake",reason="forbidden",route="numbers.delete"} 0
faxgate_denied_total{caller="unidentified",reason="unidentified_caller",route="numbers.delete"} 0
# HELP faxgate_rate_limited_total Requests refused with 429 by the per-caller rate limit.
# TYPE faxgate_rate_limited_total counter
faxgate_rate_limited_total{caller="billing"} 0
faxgate_rate_limited_total{caller="intake"} 0
# HELP faxgate_upstream_401_retries_total Requests resent once with a new token after the upstream answered 401.
# TYPE faxgate_upstream_401_retries_total counter
faxgate_upstream_401_retries_total{route="contacts.create"} 0
faxgate_upstream_401_retries_total{route="contacts.details"} 0
faxgate_upstream_401_retries_total{route="contacts.list"} 0
faxgate_upstream_401_retries_total{route="contacts.upload_patient_doc"} 0
faxgate_upstream_401_retries_total{route="esign.field_rules.list"} 0
faxgate_upstream_401_retries_total{route="esign.fields.create"} 0
faxgate_upstream_401_retries_total{route="esign.fields.update"} 0
faxgate_upstream_401_retries_total{route="esign.templates.list"} 0
faxgate_upstream_401_retries_total{route="esign.theme.delete"} 0
faxgate_upstream_401_retries_total{route="faxes.send"} 0
faxgate_upstream_401_retries_total{route="numbers.available_list"} 0
faxgate_upstream_401_retries_total{route="numbers.delete"} 0
faxgate_upstream_401_retries_total{route="numbers.filled_requirements"} 0
faxgate_upstream_401_retries_total{route="unmatched"} 0
# HELP faxgate_upstream_budget_refused_total Requests refused with 429 upstream_budget_exhausted, by caller and the limit that refused.
# TYPE faxgate_upstream_budget_refused_total counter
faxgate_upstream_budget_refused_total{caller="billing",limit="tenant"} 0
faxgate_upstream_budget_refused_total{caller="intake",limit="tenant"} 0
# HELP faxgate_upstream_throttled_total Upstream 429 answers seen, by route; each one, with upstream_budget.honor_retry_after, holds the route.
# TYPE faxgate_upstream_throttled_total counter
faxgate_upstream_throttled_total{route="contacts.create"} 0
faxgate_upstream_throttled_total{route="contacts.details"} 0
faxgate_upstream_throttled_total{route="contacts.list"} 0
faxgate_upstream_throttled_total{route="contacts.upload_patient_doc"} 0
faxgate_upstream_throttled_total{route="esign.field_rules.list"} 0
faxgate_upstream_throttled_total{route="esign.fields.create"} 0
faxgate_upstream_throttled_total{route="esign.fields.update"} 0
faxgate_upstream_throttled_total{route="esign.templates.list"} 0
faxgate_upstream_throttled_total{route="esign.theme.delete"} 0
faxgate_upstream_throttled_total{route="faxes.send"} 0
faxgate_upstream_throttled_total{route="numbers.available_list"} 0
faxgate_upstream_throttled_total{route="numbers.delete"} 0
faxgate_upstream_throttled_total{route="numbers.filled_requirements"} 0
faxgate_upstream_throttled_total{route="unmatched"} 0
`

// TestWaitSeriesFromTheStart: with upstream_budget.max_wait, the waiting
// gauge and every configured caller's wait histogram exist before the first
// request (docs/upstream-budget.md#waiting-instead-of-refusing); without it,
// the histogram has no series.
func TestWaitSeriesFromTheStart(t *testing.T) {
	names := []string{"faxgate_upstream_budget_waiting", "faxgate_upstream_budget_wait_seconds",
		"faxgate_upstream_budget_max_wait_seconds", "faxgate_upstream_budget_max_waiting"}
	off := gatewaytest.Start(t, gatewaytest.Options{Config: startSeriesConfig})
	if err := testutil.GatherAndCompare(off.Registry, strings.NewReader(waitingGolden+maxWaitGolden(0, 1000)), names...); err != nil {
		t.Errorf("max_wait 0s: %v", err)
	}
	on := gatewaytest.Start(t, gatewaytest.Options{Config: startSeriesConfig + "  max_wait: 5s\n  max_waiting: 50\n"})
	var want strings.Builder
	want.WriteString(waitingGolden + maxWaitGolden(5, 50))
	want.WriteString(`# HELP faxgate_upstream_budget_wait_seconds Time waited for a hold or an upstream_budget limit by requests that were then admitted, by caller.
# TYPE faxgate_upstream_budget_wait_seconds histogram
`)
	for _, c := range []string{"billing", "intake"} {
		for _, le := range []string{"0.01", "0.05", "0.1", "0.25", "0.5", "1", "2", "5", "10", "20", "30", "60", "120", "+Inf"} {
			want.WriteString(`faxgate_upstream_budget_wait_seconds_bucket{caller="` + c + `",le="` + le + "\"} 0\n")
		}
		want.WriteString(`faxgate_upstream_budget_wait_seconds_sum{caller="` + c + "\"} 0\n")
		want.WriteString(`faxgate_upstream_budget_wait_seconds_count{caller="` + c + "\"} 0\n")
	}
	if err := testutil.GatherAndCompare(on.Registry, strings.NewReader(want.String()), names...); err != nil {
		t.Errorf("max_wait 5s: %v", err)
	}
}

const waitingGolden = `
# HELP faxgate_upstream_budget_waiting Requests waiting now on this replica for a Retry-After hold to end or an upstream_budget limit to free a slot (upstream_budget.max_wait).
# TYPE faxgate_upstream_budget_waiting gauge
faxgate_upstream_budget_waiting 0
`

func maxWaitGolden(wait, waiting int) string {
	return fmt.Sprintf(`# HELP faxgate_upstream_budget_max_wait_seconds upstream_budget.max_wait in force: the longest a request waits for a hold or a limit (0: refused at once).
# TYPE faxgate_upstream_budget_max_wait_seconds gauge
faxgate_upstream_budget_max_wait_seconds %d
# HELP faxgate_upstream_budget_max_waiting upstream_budget.max_waiting in force: the most requests waiting at once on this replica.
# TYPE faxgate_upstream_budget_max_waiting gauge
faxgate_upstream_budget_max_waiting %d
`, wait, waiting)
}
