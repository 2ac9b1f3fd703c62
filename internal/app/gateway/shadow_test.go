package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/gateway"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// shadowLive: intake (loopback) may call the contacts routes, with room
// for every request of these tests; no caller may delete a number.
const shadowLive = `
callers:
  list:
    - name: intake
      cidrs: ["127.0.0.0/8"]
      allow: ["contacts.*"]
      rate_limit: { rps: 0.01, burst: 100 }
`

// shadowNobody is a candidate no request of these tests is from.
const shadowNobody = `
callers:
  list:
    - name: intake
      cidrs: ["10.0.0.0/8"]
      allow: ["*"]
`

// shadowTight is the live configuration with intake's burst cut to 2, and
// numbers.delete granted to it (rate_limit may come after it).
const shadowTight = `
callers:
  list:
    - name: intake
      cidrs: ["127.0.0.0/8"]
      allow: ["contacts.*", "numbers.delete"]
      rate_limit: { rps: 0.01, burst: 2 }
`

// decisions is faxgate_shadow_decisions_total{intake, route, live, candidate}.
func decisions(g *gatewaytest.Gateway, route, live, cand string) float64 {
	return testutil.ToFloat64(g.Metrics.Proxy.ShadowDecisions.WithLabelValues("intake", route, live, cand))
}

// answer is what a caller sees of a response: the status, the body and
// every header but those that differ on every response (the date, the
// request ID, the vendor's window reset, a time).
func answer(resp *http.Response, body string) string {
	lines := []string{resp.Status}
	for k, vs := range resp.Header {
		if k != "Date" && k != "X-Request-Id" && k != "X-Ratelimit-Reset" {
			lines = append(lines, k+": "+strings.Join(vs, ","))
		}
	}
	slices.Sort(lines[1:])
	return strings.Join(lines, "\n") + "\n" + body
}

// TestShadowDeniesEverythingNothingChanges: a candidate that identifies
// nobody refuses every request, and callers see exactly what a gateway
// without a candidate answers; every decision is counted, the access line
// says what the candidate would have answered, the status page and
// /status.json show the differences per caller.
func TestShadowDeniesEverythingNothingChanges(t *testing.T) {
	// Each in front of a simulator of its own, so that both see the same.
	plain := gatewaytest.Start(t, gatewaytest.Options{Config: shadowLive})
	g := gatewaytest.Start(t, gatewaytest.Options{Config: shadowLive, Shadow: shadowNobody})

	const n = 5
	for i := range n {
		want := answer(plain.Do(t, "POST", "/v1/contacts/list", `{"page":1}`))
		got := answer(g.Do(t, "POST", "/v1/contacts/list", `{"page":1}`))
		if got != want {
			t.Fatalf("request %d: with the candidate\n%s\nwithout\n%s", i, got, want)
		}
		if !strings.HasPrefix(got, "200 ") {
			t.Fatalf("request %d: %s", i, got)
		}
	}
	if got := decisions(g, "contacts.list", "allowed", "unidentified_caller"); got != n {
		t.Errorf("faxgate_shadow_decisions_total{live=allowed, candidate=unidentified_caller} = %v, want %d", got, n)
	}
	if got := decisions(g, "contacts.list", "allowed", "allowed"); got != 0 {
		t.Errorf("the candidate agreed %v times", got)
	}
	line := g.LastAccessLine(t, "contacts.list")
	if line["shadow"] != "unidentified_caller" || line["status"] != float64(200) {
		t.Errorf("access line %v, want status 200 and shadow unidentified_caller", line)
	}
	if l := plain.LastAccessLine(t, "contacts.list"); l["shadow"] != nil {
		t.Errorf("an access line without a candidate carries shadow: %v", l)
	}

	st, _ := getStatus(t, g)
	if st.Shadow == nil || !strings.HasSuffix(st.Shadow.ConfigFile, "candidate.yaml") {
		t.Fatalf("status shadow %+v, want the candidate's file", st.Shadow)
	}
	if d := st.Shadow.Differences["intake"]; len(d) != 1 || d[0].Live != "allowed" || d[0].Candidate != "unidentified_caller" || d[0].Count != n {
		t.Errorf("differences of intake %+v, want %d allowed/unidentified_caller", d, n)
	}
	_, page := adminGet(t, g, "/", "")
	if !strings.Contains(page, `id="shadow"`) || !strings.Contains(page, "unidentified_caller") {
		t.Error("the status page has no shadow section with the difference")
	}
	if st, _ := getStatus(t, plain); st.Shadow != nil {
		t.Errorf("a gateway without a candidate shows %+v", st.Shadow)
	}
}

// TestShadowGrantsNothing: a candidate granting numbers.delete reports
// that it would have allowed it; the request is refused, nothing reaches
// the upstream, and the audit line says forbidden.
func TestShadowGrantsNothing(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: shadowLive, Shadow: shadowTight})
	resp, body := g.Do(t, "POST", "/v1/numbers/delete?number_id=num_1001", `{"number_id":"num_1001"}`,
		"X-Faxgate-Confirm", "num_1001")
	if _, _, code := gatewaytest.Envelope(t, body); resp.StatusCode != http.StatusForbidden || code != "forbidden" {
		t.Fatalf("delete: %d %s", resp.StatusCode, body)
	}
	if n := g.Sim.RouteCounts()["numbers.delete"]; n != 0 {
		t.Errorf("the upstream saw %d deletes", n)
	}
	if got := decisions(g, "numbers.delete", "forbidden", "allowed"); got != 1 {
		t.Errorf("faxgate_shadow_decisions_total{numbers.delete, forbidden, allowed} = %v, want 1", got)
	}
	if line := g.LastAccessLine(t, "numbers.delete"); line["shadow"] != "allowed" {
		t.Errorf("access line %v, want shadow allowed", line)
	}
	var audit []map[string]any
	eventually.Eventually(t, 5*time.Second, "the audit line", func() bool {
		audit = g.LogLines("audit")
		return len(audit) > 0
	})
	if a := audit[len(audit)-1]; len(audit) != 1 || a["decision"] != "denied" || a["status"] != float64(403) {
		t.Errorf("audit lines %v, want one, denied", audit)
	}
}

// TestShadowCountsInItsOwnState: a candidate with a tighter limit rate
// limits in its own buckets; the live limit counts only the live requests.
func TestShadowCountsInItsOwnState(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: shadowLive, Shadow: shadowTight})
	for i := range 5 {
		resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if got, want := resp.Header.Get("RateLimit-Remaining"), []string{"99", "98", "97", "96", "95"}[i]; got != want {
			t.Errorf("request %d: RateLimit-Remaining %s, want %s: the candidate spent the live bucket", i, got, want)
		}
	}
	if a, r := decisions(g, "contacts.list", "allowed", "allowed"), decisions(g, "contacts.list", "allowed", "rate_limited"); a != 2 || r != 3 {
		t.Errorf("the candidate allowed %v and rate limited %v, want 2 and 3", a, r)
	}
}

// TestShadowRedisStalled: a candidate whose limits live in Redis counts
// them under key_prefix + "shadow:"; with that Redis stopped (SIGSTOP, the
// connections stay open), requests are no slower, and the candidate
// catches up once it answers. Removing the candidate stops its decisions
// and deletes its keys.
func TestShadowRedisStalled(t *testing.T) {
	srv := redistest.Start(t)
	cand := strings.Replace(shadowTight, "callers:", "rate_limit:\n  backend: redis\ncallers:", 1)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: shadowLive, Shadow: cand, RedisAddr: srv.Addr, ConfigFile: true,
		// A stalled candidate decision waits this long before it gives up.
		RateLimitTimeout: 3 * time.Second})
	for range 3 {
		if resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	eventually.Eventually(t, 5*time.Second, "three candidate decisions", func() bool {
		return decisions(g, "contacts.list", "allowed", "allowed")+decisions(g, "contacts.list", "allowed", "rate_limited") == 3
	})
	if got := decisions(g, "contacts.list", "allowed", "rate_limited"); got != 1 {
		t.Errorf("the candidate rate limited %v of 3 with a burst of 2", got)
	}
	rc := srv.Client(t)
	prefix := g.Config.Redis.KeyPrefix
	shadowKeys := func() []string {
		keys, err := rc.Keys(context.Background(), prefix+"shadow:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if len(shadowKeys()) == 0 {
		t.Fatalf("no key under %sshadow:", prefix)
	}
	if keys, _ := rc.Keys(context.Background(), prefix+"rl:*").Result(); len(keys) != 0 {
		t.Errorf("the candidate wrote live keys %v", keys)
	}

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = srv.Signal(syscall.SIGCONT)
		}
	})
	var slowest time.Duration
	for range 5 {
		start := time.Now()
		if resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`); resp.StatusCode != 200 {
			t.Fatalf("status %d with the candidate's Redis stopped", resp.StatusCode)
		}
		slowest = max(slowest, time.Since(start))
	}
	// A request that waited for the candidate would take 3 s.
	if slowest > time.Second {
		t.Errorf("with the candidate's Redis stopped the slowest request took %v", slowest)
	}
	if got := decisions(g, "contacts.list", "allowed", "rate_limited"); got != 1 {
		t.Errorf("%v decisions made while Redis was stopped", got-1)
	}
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	eventually.Eventually(t, 10*time.Second, "the five stalled decisions", func() bool {
		return decisions(g, "contacts.list", "allowed", "rate_limited") == 6
	})

	g.RewriteConfig(t, shadowLive+"shadow:\n  config_file: \"\"\n")
	eventually.Eventually(t, 5*time.Second, "the candidate removed", func() bool { return g.Handler.ShadowRules() == nil })
	eventually.Eventually(t, 5*time.Second, "its keys deleted", func() bool { return len(shadowKeys()) == 0 })
	if got := decisions(g, "contacts.list", "allowed", "rate_limited"); got != 0 {
		t.Errorf("the removed candidate's series is still %v", got)
	}
	g.Do(t, "POST", "/v1/contacts/list", `{}`)
	if line := g.LastAccessLine(t, "contacts.list"); line["shadow"] != nil {
		t.Errorf("a request after the removal carries shadow: %v", line)
	}
	if got := decisions(g, "contacts.list", "allowed", "allowed") + decisions(g, "contacts.list", "allowed", "rate_limited"); got != 0 {
		t.Errorf("%v decisions after the removal", got)
	}
	if st, _ := getStatus(t, g); st.Shadow != nil {
		t.Errorf("the status still shows %+v", st.Shadow)
	}
}

// TestShadowBrokenCandidateKeepsThePrevious: a candidate file that does
// not load fails the reload (faxgate_config_reload_total{result="error"},
// each problem with the file's name) and the candidate in force stays; a
// valid one then replaces it.
func TestShadowBrokenCandidateKeepsThePrevious(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: shadowLive, Shadow: shadowTight, ConfigFile: true})
	before := g.Handler.ShadowRules()
	errors := g.Metrics.ConfigReload.WithLabelValues("error")
	g.RewriteShadow(t, strings.Replace(shadowTight, "127.0.0.0/8", "127.0.0/8", 1))
	eventually.Eventually(t, 5*time.Second, "the failed reload", func() bool { return testutil.ToFloat64(errors) == 1 })
	if g.Handler.ShadowRules() != before {
		t.Fatal("the broken candidate replaced the one in force")
	}
	st, _ := getStatus(t, g)
	if len(st.Config.Problems) != 1 || !strings.Contains(st.Config.Problems[0], "candidate.yaml") ||
		!strings.Contains(st.Config.Problems[0], "callers.list[0].cidrs[0]") {
		t.Errorf("problems %q, want the candidate's file and the YAML path", st.Config.Problems)
	}
	g.Do(t, "POST", "/v1/contacts/list", `{}`)
	g.Do(t, "POST", "/v1/contacts/list", `{}`)
	g.Do(t, "POST", "/v1/contacts/list", `{}`)
	if got := decisions(g, "contacts.list", "allowed", "rate_limited"); got != 1 {
		t.Errorf("the candidate in force rate limited %v of 3, want 1", got)
	}

	g.RewriteShadow(t, shadowNobody)
	eventually.Eventually(t, 5*time.Second, "the new candidate", func() bool { return g.Handler.ShadowRules() != before })
	g.Do(t, "POST", "/v1/contacts/list", `{}`)
	if got := decisions(g, "contacts.list", "allowed", "unidentified_caller"); got != 1 {
		t.Errorf("the new candidate refused %v as unidentified, want 1", got)
	}
	waitStatus(t, g, func(st gateway.Status) bool { return st.Config.LastResult == "ok" })
}

// TestShadowAccessLinesOutliveShutdown: the access lines of requests whose
// candidate decision still waits on a stopped Redis are all written before
// the gateway's exit returns.
func TestShadowAccessLinesOutliveShutdown(t *testing.T) {
	srv := redistest.Start(t)
	cand := strings.Replace(shadowTight, "callers:", "rate_limit:\n  backend: redis\ncallers:", 1)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: shadowLive, Shadow: cand, RedisAddr: srv.Addr,
		// Each stalled decision gives up after this, then falls back.
		RateLimitTimeout: time.Second})
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })
	const n = 4
	for range n {
		if resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := len(g.LogLines("request")); got != n {
		t.Errorf("%d access lines once the gateway stopped, want %d", got, n)
	}
	if got := decisions(g, "contacts.list", "allowed", "allowed") + decisions(g, "contacts.list", "allowed", "rate_limited"); got != n {
		t.Errorf("%v candidate decisions, want %d", got, n)
	}
}
