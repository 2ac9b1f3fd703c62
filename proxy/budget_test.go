package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// limitedSim is a simulator that enforces the vendor's limits.
func limitedSim(t *testing.T, endpoint, tenant faxsim.Window) (*faxsim.Sim, *httptest.Server) {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key, EndpointLimit: endpoint, TenantLimit: tenant})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	return sim, up
}

func adminJSON(t *testing.T, g *gatewaytest.Gateway, path string, out any) {
	t.Helper()
	resp, err := http.Get(g.AdminURL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// TestUpstream429HoldsTheRoute: the upstream's first 429 is relayed
// unchanged; then the route is held until its Retry-After passes, callers
// get 429 upstream_throttled with the time left, nothing reaches the
// upstream, and other routes go on.
func TestUpstream429HoldsTheRoute(t *testing.T) {
	sim, up := limitedSim(t, faxsim.Window{Requests: 3, Per: 3 * time.Second}, faxsim.Window{})
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers, Sim: sim, Upstream: up})
	for i := range 3 {
		if resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.UpstreamRateLimitRemaining.WithLabelValues("contacts.list")); got != 0 {
		t.Errorf("faxgate_upstream_ratelimit_remaining = %v, want the upstream's 0", got)
	}
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`)
	if resp.StatusCode != 429 || body != "{\"status\":0,\"message\":\"Too Many Attempts.\"}\n" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the upstream's 429 was not relayed unchanged: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	seen := sim.RouteCounts()["POST /v1/contacts/list"]
	resp, body = g.Do(t, "POST", "/v1/contacts/list", `{}`)
	status, _, code := gatewaytest.Envelope(t, body)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || status != 0 || code != "upstream_throttled" || ra < 1 || ra > 3 {
		t.Fatalf("during the hold: %d %s Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if got := sim.RouteCounts()["POST /v1/contacts/list"]; got != seen {
		t.Errorf("the upstream saw %d requests during the hold", got-seen)
	}
	if resp, body := g.Do(t, "GET", "/v1/esign_templates", ""); resp.StatusCode != 200 {
		t.Errorf("another route during the hold: %d %s", resp.StatusCode, body)
	}
	if got := testutil.ToFloat64(g.Metrics.Limits.UpstreamThrottled.WithLabelValues("contacts.list")); got != 1 {
		t.Errorf("faxgate_upstream_throttled_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.Denied.WithLabelValues("svc", "contacts.list", "upstream_throttled")); got != 1 {
		t.Errorf("denied{upstream_throttled} = %v, want 1", got)
	}
	var st struct {
		Backend string `json:"backend"`
		Holds   []struct {
			Route string `json:"route"`
			Left  int    `json:"retry_after_seconds"`
		} `json:"holds"`
	}
	adminJSON(t, g, "/budget", &st)
	if st.Backend != "none" || len(st.Holds) != 1 || st.Holds[0].Route != "contacts.list" || st.Holds[0].Left < 1 {
		t.Errorf("GET /budget: %+v", st)
	}
	// The hold ends with the upstream's window: the route works again.
	deadline := time.Now().Add(6 * time.Second)
	for {
		resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d after the Retry-After", resp.StatusCode)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestUpstream429NotHonoured: with honor_retry_after false, every 429 is
// relayed and counted, and nothing is held.
func TestUpstream429NotHonoured(t *testing.T) {
	sim, up := limitedSim(t, faxsim.Window{Requests: 1, Per: time.Minute}, faxsim.Window{})
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + "upstream_budget:\n  honor_retry_after: false\n", Sim: sim, Upstream: up})
	g.Do(t, "POST", "/v1/contacts/list", `{}`)
	for range 2 {
		if resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`); resp.StatusCode != 429 || body != "{\"status\":0,\"message\":\"Too Many Attempts.\"}\n" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	if got := testutil.ToFloat64(g.Metrics.Limits.UpstreamThrottled.WithLabelValues("contacts.list")); got != 2 {
		t.Errorf("throttled = %v, want 2", got)
	}
}

// TestBudgetSharesAndRefuses: a caller over its share gets 429
// upstream_budget_exhausted with an honest Retry-After and the upstream
// never sees the request; the reserved caller still gets its reserve;
// GET /budget shows the window.
func TestBudgetSharesAndRefuses(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + `
upstream_budget:
  limits:
    - { name: tenant, scope: tenant, requests: 5, per: 1m }
  shares:
    ops: { reserve: 0.4 }
`})
	for i := range 3 {
		if resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`); resp.StatusCode != 200 {
			t.Fatalf("svc request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	seen := g.Sim.RouteCounts()["POST /v1/contacts/list"]
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`)
	status, msg, code := gatewaytest.Envelope(t, body)
	if resp.StatusCode != 429 || status != 0 || code != "upstream_budget_exhausted" ||
		msg != "caller svc has used its share of upstream budget tenant" {
		t.Fatalf("over its share: %d %s", resp.StatusCode, body)
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 59 || ra > 60 {
		t.Errorf("Retry-After %q, want 60 (its first request leaves the window in a minute)", resp.Header.Get("Retry-After"))
	}
	if got := g.Sim.RouteCounts()["POST /v1/contacts/list"]; got != seen {
		t.Errorf("a refused request reached the upstream")
	}
	for i := range 2 {
		if resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Faxgate-Caller", "ops"); resp.StatusCode != 200 {
			t.Fatalf("ops request %d within its reserve: %d %s", i, resp.StatusCode, body)
		}
	}
	if got := testutil.ToFloat64(g.Metrics.Limits.BudgetRefused.WithLabelValues("svc", "tenant")); got != 1 {
		t.Errorf("faxgate_upstream_budget_refused_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(g.Metrics.Limits.BudgetUsedRatio.WithLabelValues("tenant", "")); got != 1 {
		t.Errorf("faxgate_upstream_budget_used_ratio = %v, want 1", got)
	}
	var st struct {
		Backend string `json:"backend"`
		Limits  []struct {
			Name    string `json:"name"`
			Windows []struct {
				Used    int `json:"used"`
				Callers map[string]struct {
					Used, Reserved, Remaining int
				} `json:"callers"`
			} `json:"windows"`
		} `json:"limits"`
	}
	adminJSON(t, g, "/budget", &st)
	if st.Backend != "local" || len(st.Limits) != 1 || st.Limits[0].Name != "tenant" || len(st.Limits[0].Windows) != 1 {
		t.Fatalf("GET /budget: %+v", st)
	}
	w := st.Limits[0].Windows[0]
	if w.Used != 5 || w.Callers["ops"].Reserved != 2 || w.Callers["ops"].Used != 2 || w.Callers["svc"].Used != 3 || w.Callers["svc"].Remaining != 0 {
		t.Errorf("window %+v", w)
	}
}
