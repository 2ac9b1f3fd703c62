package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// budgetCallers: batch is the greedy caller (by source address), intake the
// reserved one (by the mesh header).
const budgetCallers = `
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - name: batch
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
    - name: intake
      header_values: ["intake"]
      allow: ["*"]
rate_limit:
  default: { rps: 100000, burst: 100000 }
  replicas_hint: 3
log:
  level: warn
`

// budgetFleet is three replicas sharing Redis for the token, the rate
// limits and the budget, in front of a simulator that enforces the vendor's
// limits.
func budgetFleet(t *testing.T, redisAddr string, vendor faxsim.Window, budget string) *fleet {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key, EndpointLimit: vendor})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	f := &fleet{sim: sim, up: up}
	for range 3 {
		f.gws = append(f.gws, gatewaytest.Start(t, gatewaytest.Options{Config: budgetCallers + budget, Sim: sim, Upstream: up,
			RedisAddr: redisAddr, RateLimitRedisAddr: redisAddr, RateLimitTimeout: 2 * time.Second}))
	}
	return f
}

// answer is one response's status and error code.
type answer struct {
	status     int
	code       string
	retryAfter string
}

func call(t *testing.T, g *gatewaytest.Gateway, caller string) answer {
	t.Helper()
	var hdr []string
	if caller == "intake" {
		hdr = []string{"X-Faxgate-Caller", "intake"}
	}
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, hdr...)
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	var env struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(body), &env) == nil {
		a.code = env.Error
	}
	return a
}

const budget20 = `
upstream_budget:
  limits:
    - { name: per-route, scope: route, requests: 20, per: 10s }
  shares:
    intake: { reserve: 0.25 }
`

// TestFleetSharesTheVendorBudgetFairly: the greedy caller, spread over three
// replicas, gets the unreserved 15 of the vendor's 20 per 10 s; the reserved
// caller still gets its 5; the fleet admits exactly the limit, and the
// vendor never has to say 429.
func TestFleetSharesTheVendorBudgetFairly(t *testing.T) {
	r := redistest.Start(t)
	f := budgetFleet(t, r.Addr, faxsim.Window{Requests: 20, Per: 10 * time.Second}, budget20)
	counts := map[string]map[int]int{"batch": {}, "intake": {}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, g := range f.gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 12 {
				a := call(t, g, "batch")
				mu.Lock()
				counts["batch"][a.status]++
				mu.Unlock()
				if a.status == 429 && a.code != "upstream_budget_exhausted" {
					t.Errorf("replica %d: 429 %q", i, a.code)
				}
			}
		}()
	}
	wg.Wait()
	for i := range 6 {
		a := call(t, f.gws[i%3], "intake")
		counts["intake"][a.status]++
		if i == 5 && (a.status != 429 || a.code != "upstream_budget_exhausted" || a.retryAfter == "") {
			t.Errorf("intake past its reserve with the pool used: %+v", a)
		}
	}
	if counts["batch"][200] != 15 || counts["intake"][200] != 5 {
		t.Errorf("admitted batch %d (want 15), intake %d (want its reserve 5): %v", counts["batch"][200], counts["intake"][200], counts)
	}
	total := counts["batch"][200] + counts["intake"][200]
	if total < 19 || total > 21 { // within 5% of 20
		t.Errorf("the fleet admitted %d, want 20 within 5%%", total)
	}
	if n := f.sim.RouteCounts()["POST /v1/contacts/list"]; n != total {
		t.Errorf("the upstream saw %d, the fleet admitted %d", n, total)
	}
	if f.sim.Throttled() != 0 {
		t.Errorf("the vendor answered 429 %d times: the budget let too much through", f.sim.Throttled())
	}
	var refused float64
	for _, g := range f.gws {
		refused += testutil.ToFloat64(g.Metrics.Limits.BudgetRefused.WithLabelValues("batch", "per-route"))
	}
	if refused != float64(counts["batch"][429]) {
		t.Errorf("refusals counted %v, answered %d", refused, counts["batch"][429])
	}
}

// TestFleetHoldsAfterOneUpstream429: a 429 seen by one replica holds the
// route on all three within a second; nothing reaches the upstream until
// its Retry-After passes.
func TestFleetHoldsAfterOneUpstream429(t *testing.T) {
	r := redistest.Start(t)
	f := budgetFleet(t, r.Addr, faxsim.Window{Requests: 4, Per: 10 * time.Second}, "")
	var a answer
	for range 5 {
		if a = call(t, f.gws[0], "batch"); a.status != 200 {
			break
		}
	}
	if a.status != 429 || a.code != "" {
		t.Fatalf("replica 0 did not relay the vendor's 429: %+v", a)
	}
	sent := f.sim.RouteCounts()["POST /v1/contacts/list"]
	// Every replica holds within a second of the 429, as its callers see it.
	holding := map[int]bool{0: true}
	eventually.EventuallyErr(t, time.Second, "every replica holding", func() error {
		for i, g := range f.gws {
			if holding[i] {
				continue
			}
			b := call(t, g, "batch")
			if b.status != 429 || b.code != "upstream_throttled" {
				return fmt.Errorf("replica %d answered %+v", i, b)
			}
			holding[i] = true
			if n, _ := strconv.Atoi(b.retryAfter); n < 1 || n > 10 {
				t.Errorf("replica %d: Retry-After %q", i, b.retryAfter)
			}
		}
		return nil
	})
	// The replicas' requests before they held may have reached the vendor
	// (and been refused there); once all hold, none does.
	sent = max(sent, f.sim.RouteCounts()["POST /v1/contacts/list"])
	for _, g := range f.gws {
		if b := call(t, g, "batch"); b.code != "upstream_throttled" {
			t.Errorf("not held: %+v", b)
		}
	}
	if n := f.sim.RouteCounts()["POST /v1/contacts/list"]; n != sent {
		t.Errorf("%d requests reached the upstream during the hold", n-sent)
	}
	var throttled float64
	for _, g := range f.gws {
		throttled += testutil.ToFloat64(g.Metrics.Limits.UpstreamThrottled.WithLabelValues("contacts.list"))
	}
	if throttled < 1 {
		t.Error("faxgate_upstream_throttled_total counted nothing")
	}
}

// TestFleetBudgetThroughARedisOutage: with Redis killed mid-traffic every
// replica enforces its replicas_hint share locally: no request fails, the
// fallback is counted, and after a restart the fleet shares again. Local
// windows start empty, so across the outage's first window the fleet may
// admit up to the limit on top of what the shared window held: with the
// budget set a little under the vendor's limit (here 20 of 25, as docs/upstream-budget.md
// advises) the vendor never has to refuse.
func TestFleetBudgetThroughARedisOutage(t *testing.T) {
	r := redistest.Start(t)
	f := budgetFleet(t, r.Addr, faxsim.Window{Requests: 25, Per: 10 * time.Second}, budget20)
	for i := range 5 {
		if a := call(t, f.gws[i%3], "batch"); a.status != 200 {
			t.Fatalf("before the outage: %+v", a)
		}
	}
	r.Kill()
	ok := 0
	for i := range 45 {
		a := call(t, f.gws[i%3], "batch")
		switch {
		case a.status == 200:
			ok++
		case a.status == 429 && a.code == "upstream_budget_exhausted":
		default:
			t.Fatalf("request %d during the outage: %+v", i, a)
		}
	}
	// Locally each replica has 20/3 = 6 (reserve floor(0.25 x 6) = 1 kept for
	// intake): 5 for batch each, whatever the shared window held.
	if ok != 15 {
		t.Errorf("during the outage batch got %d, want 3 x 5", ok)
	}
	if f.sim.Throttled() != 0 {
		t.Errorf("the vendor refused %d requests", f.sim.Throttled())
	}
	for i, g := range f.gws {
		if testutil.ToFloat64(g.Metrics.Limits.BudgetFallback) == 0 {
			t.Errorf("replica %d counted no fallback", i)
		}
		if a := call(t, g, "intake"); a.status != 200 {
			t.Errorf("replica %d: intake's local reserve: %+v", i, a)
		}
	}
	r.Restart(t)
	// A request lets the replica find Redis again.
	eventually.EventuallyErr(t, 10*time.Second, "GET /budget on Redis again", func() error {
		resp, err := http.Get(f.gws[0].AdminURL + "/budget")
		if err != nil {
			t.Fatal(err)
		}
		var st struct{ Backend string }
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		call(t, f.gws[0], "intake")
		if st.Backend != "redis" {
			return fmt.Errorf("it says %q", st.Backend)
		}
		return nil
	})
	if logs := f.gws[0].Logs(); !strings.Contains(logs, "upstream budget is enforced locally") {
		t.Errorf("no outage warning in the logs")
	}
}
