package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// TestAssembledAuditSurvivesErrorLevel drives the gateway as faxgate serve
// assembles it (gateway.New, Run) with log.level: error: access lines are
// gone, and every attempt on numbers.delete, denied or forwarded, still has
// its audit line, as docs/logs.md promises.
func TestAssembledAuditSurvivesErrorLevel(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
log:
  level: error
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - name: ops
      header_values: ["ops"]
      allow: ["*", "numbers.delete"]
    - name: svc
      header_values: ["svc"]
      allow: ["*"]
`})
	body := `{"number_id":"num_1001","order_id":"ord_1"}`
	if res, _ := g.Do(t, "POST", "/v1/numbers/delete", body, "X-Faxgate-Caller", "svc"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("svc delete: %d, want 403", res.StatusCode)
	}
	if res, _ := g.Do(t, "POST", "/v1/numbers/delete", body, "X-Faxgate-Caller", "ops",
		"X-Faxgate-Confirm", "num_1001"); res.StatusCode == http.StatusForbidden || res.StatusCode >= 500 {
		t.Fatalf("ops delete: %d, want the upstream's answer", res.StatusCode)
	}
	if res, _ := g.Do(t, "GET", "/v1/esign_templates", "", "X-Faxgate-Caller", "svc"); res.StatusCode != http.StatusOK {
		t.Fatalf("templates: %d", res.StatusCode)
	}
	// Lines are written after the response; wait for both.
	var lines []map[string]any
	eventually.Eventually(t, 5*time.Second, "two audit lines", func() bool {
		lines = g.LogLines("audit")
		return len(lines) >= 2
	})
	if len(lines) != 2 {
		t.Fatalf("%d audit lines at log.level error, want 2:\n%s", len(lines), g.Logs())
	}
	want := []struct{ caller, decision, reason string }{{"svc", "denied", "forbidden"}, {"ops", "forwarded", ""}}
	for i, w := range want {
		l := lines[i]
		if l["caller"] != w.caller || l["decision"] != w.decision || l["reason"] != w.reason ||
			l["number_id"] != "num_1001" || l["logger"] != "audit" || l["level"] != "info" {
			t.Errorf("audit line %d = %v, want caller %s, decision %s, reason %q, number_id num_1001, logger audit", i, l, w.caller, w.decision, w.reason)
		}
	}
	if n := len(g.LogLines("request")); n != 0 {
		t.Errorf("%d access lines at log.level error, want 0", n)
	}
	if strings.Contains(g.Logs(), gatewaytest.Key) {
		t.Fatal("the API key is in the logs")
	}
}
