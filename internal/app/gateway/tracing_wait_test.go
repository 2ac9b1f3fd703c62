package gateway_test

import (
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/otlptest"
)

// TestTracingBudgetWait: a request that waits out the vendor's Retry-After
// (upstream_budget.max_wait) instead of getting 429 has a budget.wait span
// under its request span, as long as it waited, with its cause and result;
// a request that did not wait has none.
func TestTracingBudgetWait(t *testing.T) {
	col := otlptest.Start(t, otlptest.Accept)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: traceCallers + `
upstream_budget:
  max_wait: 5s
` + tracingYAML(col.URL, 1)})
	g.Sim.ThrottleNext(1, time.Second)
	// The first meets the vendor's 429 and relays it; it holds the route.
	if resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json"); resp.StatusCode != 429 {
		t.Fatalf("first request: %d %s, want the vendor's 429", resp.StatusCode, body)
	}
	// The second waits for the hold's end, then goes through.
	start := time.Now()
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json")
	waited := time.Since(start)
	if resp.StatusCode != 200 || waited < 500*time.Millisecond {
		t.Fatalf("second request: %d after %v (%s), want 200 after waiting out the hold", resp.StatusCode, waited, body)
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	spans := col.Spans()
	srv := byName(spans, "POST contacts.list")
	if len(srv) != 2 {
		t.Fatalf("%d request spans, want 2: %v", len(srv), names(spans))
	}
	second := srv[0]
	if srv[1].Start.After(second.Start) {
		second = srv[1]
	}
	var waits int
	for _, s := range srv {
		for _, k := range children(spans, s) {
			if k.Name != "budget.wait" {
				continue
			}
			waits++
			if s.SpanID != second.SpanID {
				t.Errorf("the first request, which did not wait, has a budget.wait span")
			}
			if d := k.End.Sub(k.Start); d < 500*time.Millisecond || d > waited {
				t.Errorf("budget.wait lasts %v; the request waited %v", d, waited)
			}
			wantAttrs(t, k, map[string]string{"faxgate.wait.cause": "hold", "faxgate.result": "admitted"})
		}
	}
	if waits != 1 {
		t.Errorf("%d budget.wait spans, want 1 (the second request's)", waits)
	}
}
