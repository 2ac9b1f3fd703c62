package proxy_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
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
	// The hold ends with the upstream's window (its Retry-After is rounded
	// up to whole seconds): then the route works again.
	eventually.Eventually(t, 10*time.Second, "the hold to end", func() bool {
		_, held := g.Gateway.Holds.Held("contacts.list")
		return !held
	})
	if resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`); resp.StatusCode != 200 {
		t.Fatalf("after the hold: %d %s", resp.StatusCode, body)
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

// TestWaiterThatLeavesIs499: a caller that goes away while its request
// waits for the budget is logged as 499 client_closed, not as a refusal: no
// denial, budget refusal or status-page denial counts it.
func TestWaiterThatLeavesIs499(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + `
upstream_budget:
  max_wait: 10s
  limits:
    - { name: tenant, scope: tenant, requests: 60, per: 1m }
`})
	g.Gateway.Holds.Hold("contacts.list", 5*time.Second)
	c, err := g.Dial(nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")); err != nil {
		t.Fatal(err)
	}
	eventually.Eventually(t, 5*time.Second, "the request waiting", func() bool {
		return testutil.ToFloat64(g.Metrics.Limits.BudgetWaiting) == 1
	})
	c.Close()
	var line map[string]any
	eventually.Eventually(t, 5*time.Second, "the access line of the request that left", func() bool {
		for _, l := range g.LogLines("request") {
			if l["route"] == "contacts.list" {
				line = l
				return true
			}
		}
		return false
	})
	if line["status"] != 499.0 || line["error"] != "client_closed" || line["upstream_status"] != 0.0 {
		t.Errorf("access line %v, want status 499, error client_closed, no upstream status", line)
	}
	for name, got := range map[string]float64{
		"faxgate_denied_total (throttled)": testutil.ToFloat64(g.Metrics.Proxy.Denied.WithLabelValues("svc", "contacts.list", "upstream_throttled")),
		"faxgate_denied_total (budget)":    testutil.ToFloat64(g.Metrics.Proxy.Denied.WithLabelValues("svc", "contacts.list", "upstream_budget_exhausted")),
		"faxgate_upstream_budget_refused":  testutil.ToFloat64(g.Metrics.Limits.BudgetRefused.WithLabelValues("svc", "tenant")),
	} {
		if got != 0 {
			t.Errorf("%s = %v for a caller that left, want 0", name, got)
		}
	}
	if a := g.Handler.Activity(time.Now())["svc"]; a.Denials != 0 {
		t.Errorf("the status page counts %d denials for a caller that left, want 0", a.Denials)
	}
}

// TestWaitingGrantedDeleteHoldsItsReadBody: the body of a granted
// numbers.delete is read whole before its request is admitted (policy.confirm
// checks it, the audit line names its IDs), so it is held while the request
// waits: exactly its size, counted under server.resend_buffer_bytes, and at
// most 1 MiB (docs/upstream-budget.md#waiting-instead-of-refusing); it is
// released when the request ends.
func TestWaitingGrantedDeleteHoldsItsReadBody(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + `
upstream_budget:
  max_wait: 10s
  limits:
    - { name: tenant, scope: tenant, requests: 60, per: 1m }
`})
	g.Gateway.Holds.Hold("numbers.delete", 2*time.Second)
	body := `{"number_id":"num_1","pad":"` + strings.Repeat("a", 1<<20-64) + `"}`
	done := make(chan int, 1)
	go func() {
		resp, _ := g.Do(t, "POST", "/v1/numbers/delete", body, "Content-Type", "application/json",
			"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1")
		done <- resp.StatusCode
	}()
	eventually.Eventually(t, 5*time.Second, "the delete waiting", func() bool {
		return testutil.ToFloat64(g.Metrics.Limits.BudgetWaiting) == 1
	})
	if held := g.Handler.BodyMemoryHeld(); held < int64(len(body)) || held > 1<<20+1 {
		t.Errorf("a waiting granted delete of %d bytes holds %d bytes of counted body memory, want its body, at most 1 MiB + 1",
			len(body), held)
	}
	<-done
	if n := g.Sim.RouteCounts()["POST /v1/numbers/delete"]; n != 1 {
		t.Fatalf("the delete reached the upstream %d times after the hold, want once", n)
	}
	eventually.Eventually(t, 5*time.Second, "the body memory released", func() bool { return g.Handler.BodyMemoryHeld() == 0 })
}

// TestSlowSmallBodyThenWaitKeepsTheTimeout is the regression of a slowly
// sent small body stretching the promise: a body of up to 32 KiB is read
// whole before the request waits, and its reading took upstream.timeout of
// its own, then the wait, then another upstream.timeout upstream. The time
// the caller took to send it counts against upstream.timeout, so a caller
// sees at most max_wait + upstream.timeout (docs/upstream-budget.md).
func TestSlowSmallBodyThenWaitKeepsTheTimeout(t *testing.T) {
	// The body takes 3 s of the 4 s timeout, so the right answer comes at
	// timeout + wait and the old one 3 s later: the bound between them
	// leaves 1.5 s each way for a loaded machine.
	const (
		timeout = 4 * time.Second
		pieces  = 6
		pause   = 500 * time.Millisecond
		hold    = 1500 * time.Millisecond
	)
	g := gatewaytest.Start(t, gatewaytest.Options{UpstreamTimeout: timeout, Config: openCallers + `
server:
  read_timeout: 5s
upstream_budget:
  max_wait: 3s
  limits:
    - { name: tenant, scope: tenant, requests: 60, per: 1m }
`})
	g.Sim.SetLatency(time.Minute) // the upstream never answers in time
	c, err := g.Dial(nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"first_name":"` + strings.Repeat("a", 1000) + `"}`
	start := time.Now()
	if _, err := c.Write([]byte("POST /v1/contacts/create HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	for i := range pieces {
		time.Sleep(pause) // models a caller that sends its body slowly: 3 s in all
		if i == pieces-1 {
			g.Gateway.Holds.Hold("contacts.create", hold) // it will wait about this long
		}
		if _, err := c.Write([]byte(body[i*len(body)/pieces : (i+1)*len(body)/pieces])); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	took := time.Since(start)
	var waited time.Duration
	for _, l := range g.LogLines("request") {
		if l["route"] == "contacts.create" {
			waited = time.Duration(l["wait_ms"].(float64) * float64(time.Millisecond))
		}
	}
	t.Logf("%d after %v, %v of it waiting", resp.StatusCode, took, waited)
	if resp.StatusCode != http.StatusGatewayTimeout || waited < 250*time.Millisecond {
		t.Fatalf("status %d after waiting %v, want 504 after a wait", resp.StatusCode, waited)
	}
	// The body took 3 s of the 4 s: the exchange gets the 1 s left, not
	// 4 s more.
	if limit := timeout + waited + pieces*pause/2; took > limit {
		t.Errorf("answered after %v, want within upstream.timeout plus the wait (%v)", took, limit)
	}
}
