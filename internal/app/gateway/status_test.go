package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/app/gateway"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// statusCallers: intake by address with a small burst, billing by the mesh
// header; intake alone is granted the sensitive numbers.delete.
const statusCallers = `
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - name: intake
      cidrs: ["127.0.0.0/8"]
      allow: ["contacts.*", "numbers.delete"]
      rate_limit: { rps: 0.01, burst: 3 }
    - name: billing
      header_values: ["billing"]
      allow: ["*"]
upstream_budget:
  limits:
    - { name: tenant, scope: tenant, requests: 100, per: 1h }
  shares:
    intake: { reserve: 0.2 }
`

// startStatusGateway is a gateway in front of a simulator that answers 429
// past 5 requests a minute per endpoint.
func startStatusGateway(t *testing.T, configFile bool) *gatewaytest.Gateway {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key, EndpointLimit: faxsim.Window{Requests: 5, Per: time.Minute}})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	return gatewaytest.Start(t, gatewaytest.Options{Config: statusCallers, Sim: sim, Upstream: up, ConfigFile: configFile})
}

// adminGet is a GET on the admin listener, with its body read.
func adminGet(t *testing.T, g *gatewaytest.Gateway, path, accept string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", g.AdminURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// getStatus is GET /status.json, decoded, and its text.
func getStatus(t *testing.T, g *gatewaytest.Gateway) (gateway.Status, string) {
	t.Helper()
	resp, body := adminGet(t, g, "/status.json", "")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var st gateway.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("status.json: %v", err)
	}
	return st, body
}

func callerOf(t *testing.T, st gateway.Status, name string) gateway.CallerStatus {
	t.Helper()
	for _, c := range st.Callers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("caller %s not in the status: %+v", name, st.Callers)
	return gateway.CallerStatus{}
}

// statusTraffic sends what the page is tested on: intake over its burst
// (the 4th is rate limited), billing past the vendor's 5 a minute on
// contacts.list (the 6th gets the vendor's 429, which holds the route, the
// 7th is refused by the hold), with canaries in every part of a request.
func statusTraffic(t *testing.T, g *gatewaytest.Gateway) {
	t.Helper()
	for i := range 4 {
		resp, _ := g.Do(t, "POST", "/v1/contacts/details?canary=QUERY-CANARY-77", `{"contact_id":"BODY-CANARY-77"}`,
			"Authorization", "Bearer AUTH-CANARY-77", "X-Request-Id", "REQID-CANARY-77")
		if (i < 3) != (resp.StatusCode != http.StatusTooManyRequests) {
			t.Fatalf("intake request %d: %d, want 3 answered and the 4th rate limited", i, resp.StatusCode)
		}
	}
	for i := range 7 {
		resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Faxgate-Caller", "billing")
		if i == 5 && resp.StatusCode != 429 {
			t.Fatalf("billing request %d: %d, want the vendor's 429", i, resp.StatusCode)
		}
		if i == 6 && resp.StatusCode != 429 {
			t.Fatalf("billing request %d: %d, want 429 upstream_throttled", i, resp.StatusCode)
		}
	}
}

// TestStatusJSON: /status.json shows the token, each caller's last 5
// minutes (requests, denials, limited now), the sensitive routes and who
// is granted them, the budget's windows and holds, the config's last
// load, and the problems, the hold among them.
func TestStatusJSON(t *testing.T) {
	g := startStatusGateway(t, false)
	statusTraffic(t, g)
	st, body := getStatus(t, g)

	// The names the docs give, lower case, as the config file spells them.
	if !strings.Contains(body, `"rate_limit":{"rps":0.01,"burst":3}`) {
		t.Errorf("status.json does not spell intake's rate limit as the docs do (rps, burst):\n%.600s", body)
	}
	if st.Version != "test" || !st.Ready || st.UptimeSeconds < 0 {
		t.Errorf("version %q ready %v uptime %d", st.Version, st.Ready, st.UptimeSeconds)
	}
	if tk := st.Token; tk.State != "valid" || tk.Source != "upstream" || tk.Store != "memory" || tk.LastResult != "ok" ||
		tk.SecondsLeft < 3600 || tk.ExpiresAt == nil || tk.LastRenewal == nil {
		t.Errorf("token %+v", tk)
	}
	in := callerOf(t, st, "intake")
	if in.Requests5m != 4 || in.Denials5m != 1 || !in.LimitedNow || in.LastLimited == nil {
		t.Errorf("intake: requests %d denials %d limited now %v, want 4, 1, true", in.Requests5m, in.Denials5m, in.LimitedNow)
	}
	if in.RateLimit.Burst != 3 || in.RateLimitDefault || len(in.CIDRs) != 1 || !contains(in.Routes, "numbers.delete") {
		t.Errorf("intake's configuration: %+v", in)
	}
	bi := callerOf(t, st, "billing")
	if bi.Requests5m != 7 || bi.Denials5m != 1 || bi.LimitedNow || !bi.RateLimitDefault || bi.HeaderValues[0] != "billing" {
		t.Errorf("billing: requests %d denials %d limited now %v, want 7, 1 (the hold's), false", bi.Requests5m, bi.Denials5m, bi.LimitedNow)
	}
	if contains(bi.Routes, "numbers.delete") {
		t.Error(`billing's "*" is shown granting the sensitive numbers.delete`)
	}
	if len(st.SensitiveRoutes) != 1 || st.SensitiveRoutes[0].Route != "numbers.delete" ||
		strings.Join(st.SensitiveRoutes[0].Granted, ",") != "intake" || !st.SensitiveRoutes[0].Confirm {
		t.Errorf("sensitive routes %+v, want numbers.delete (confirm) granted to intake", st.SensitiveRoutes)
	}
	if h := st.Budget.Holds; len(h) != 1 || h[0].Route != "contacts.list" || h[0].SecondsLeft < 1 {
		t.Errorf("holds %+v, want contacts.list held", h)
	}
	if l := st.Budget.Limits; len(l) != 1 || l[0].Name != "tenant" || len(l[0].Windows) != 1 ||
		l[0].Windows[0].Callers["intake"].Reserved != 20 || l[0].Windows[0].Callers["billing"].Used != 6 {
		t.Errorf("budget limits %+v", l)
	}
	if st.Budget.Waiting != 0 || st.Budget.MaxWaitSeconds != 0 {
		t.Errorf("waiting %d (max_wait %vs) while nothing waits, with max_wait 0s", st.Budget.Waiting, st.Budget.MaxWaitSeconds)
	}
	if c := st.Config; c.LastResult != "ok" || c.Trigger != "start" || c.RestartRequired || c.LastReload.IsZero() {
		t.Errorf("config %+v", c)
	}
	if st.Redis.Configured || st.TLS.Mode != "off" {
		t.Errorf("redis %+v, tls %+v", st.Redis, st.TLS)
	}
	if len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "route contacts.list held after an upstream 429") {
		t.Errorf("problems %q, want the hold alone", st.Problems)
	}
	if st.Page == nil || len(st.Page.Problems) != 1 {
		t.Error("status.json carries no page for the page's script")
	}
}

// TestStatusPageHTML: / and /status are the page, self-contained (no URL
// of any host, nothing loaded from anywhere, a policy that forbids it),
// with the problems first; /status with Accept: application/json is the
// JSON.
func TestStatusPageHTML(t *testing.T) {
	g := startStatusGateway(t, false)
	statusTraffic(t, g)
	for _, path := range []string{"/", "/status"} {
		resp, html := adminGet(t, g, path, "")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") ||
			!strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		for _, bad := range []string{"http://", "https://", "src=", "href=", "@import", "url("} {
			if strings.Contains(html, bad) {
				t.Errorf("GET %s: the page holds %q: it must load nothing from anywhere", path, bad)
			}
		}
		problems, callers := strings.Index(html, `id="problems"`), strings.Index(html, `id="callers"`)
		if problems < 0 || callers < 0 || problems > callers {
			t.Errorf("GET %s: the problems are not first", path)
		}
		for _, want := range []string{"route contacts.list held after an upstream 429", "intake", "billing",
			"numbers.delete", "Requests (5 min)", `class="problems"`} {
			if !strings.Contains(html, want) {
				t.Errorf("GET %s: page lacks %q", path, want)
			}
		}
	}
	_, body := adminGet(t, g, "/status", "application/json")
	var st gateway.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Version != "test" {
		t.Errorf("/status with Accept: application/json: %v, version %q", err, st.Version)
	}
}

// TestStatusHoldsNoSecret: neither the page nor the JSON ever holds the API
// key or the token, nor anything of a caller's requests (query string,
// body, Authorization, request ID).
func TestStatusHoldsNoSecret(t *testing.T) {
	g := startStatusGateway(t, false)
	statusTraffic(t, g)
	tok := g.Tokens.Current()
	if tok == nil {
		t.Fatal("no token")
	}
	_, js := getStatus(t, g)
	_, html := adminGet(t, g, "/", "")
	for name, body := range map[string]string{"status.json": js, "the page": html} {
		for _, secret := range []string{gatewaytest.Key, tok.Value.Reveal(), "QUERY-CANARY-77", "BODY-CANARY-77",
			"AUTH-CANARY-77", "REQID-CANARY-77"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s holds %q", name, secret)
			}
		}
	}
}

// TestStatusShowsFailedReload: a reload that fails is on the page, in
// red, with each problem and its YAML path, and the running configuration
// stays; a valid file then clears it; a changed setting that needs a
// restart says which.
func TestStatusShowsFailedReload(t *testing.T) {
	g := startStatusGateway(t, true)
	g.RewriteConfig(t, strings.Replace(statusCallers, `["127.0.0.0/8"]
      allow`, `["127.0.0/8"]
      allow`, 1))
	st := waitStatus(t, g, func(st gateway.Status) bool { return st.Config.LastResult == "error" })
	if st.Config.File == "" || len(st.Config.Problems) != 1 || !strings.Contains(st.Config.Problems[0], `callers.list[0].cidrs[0]`) {
		t.Errorf("config %+v, want the file and the bad CIDR's YAML path", st.Config)
	}
	if len(st.Problems) == 0 || !strings.Contains(st.Problems[0], "config reload failed") ||
		!strings.Contains(st.Problems[0], `callers.list[0].cidrs[0]`) {
		t.Errorf("problems %q, want the failed reload with its problem", st.Problems)
	}
	if len(callerOf(t, st, "intake").CIDRs) != 1 || callerOf(t, st, "intake").CIDRs[0] != "127.0.0.0/8" {
		t.Error("the failed reload changed the callers shown")
	}

	g.RewriteConfig(t, statusCallers+"token:\n  refresh_before: 2h\n")
	st = waitStatus(t, g, func(st gateway.Status) bool { return st.Config.LastResult == "ok" && st.Config.Trigger != "start" })
	if !st.Config.RestartRequired || strings.Join(st.Config.RestartSettings, ",") != "token.refresh_before" {
		t.Errorf("config %+v, want token.refresh_before needing a restart", st.Config)
	}
	if len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "restart required") {
		t.Errorf("problems %q, want the restart alone", st.Problems)
	}
}

func waitStatus(t *testing.T, g *gatewaytest.Gateway, ok func(gateway.Status) bool) gateway.Status {
	t.Helper()
	var st gateway.Status
	eventually.EventuallyErr(t, 5*time.Second, "the awaited status", func() error {
		var js string
		if st, js = getStatus(t, g); !ok(st) {
			return fmt.Errorf("last status %s", js)
		}
		return nil
	})
	return st
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestStatusShowsNoToken: with the API key rejected the page says the
// gateway is not ready and why, and that there is no token, first.
func TestStatusShowsNoToken(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: statusCallers, SimKey: "another-key", NoWait: true})
	st := waitStatus(t, g, func(st gateway.Status) bool { return st.Token.LastResult == "invalid_key" })
	if st.Ready || st.Token.Valid || st.Token.ExpiresAt != nil {
		t.Errorf("ready %v, token %+v", st.Ready, st.Token)
	}
	if len(st.Problems) < 2 || !strings.HasPrefix(st.Problems[0], "not ready: upstream rejected the API secret key") ||
		!strings.Contains(st.Problems[1], "no valid upstream token") {
		t.Errorf("problems %q, want not ready and no token first", st.Problems)
	}
}

// TestStatusShowsRedisFallback: with the shared rate limit's Redis gone,
// the page says this replica limits alone.
func TestStatusShowsRedisFallback(t *testing.T) {
	r := redistest.Start(t)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: statusCallers, RateLimitRedisAddr: r.Addr,
		RateLimitTimeout: time.Second})
	if resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Faxgate-Caller", "billing"); resp.StatusCode != 200 {
		t.Fatalf("with Redis up: %d", resp.StatusCode)
	}
	st, _ := getStatus(t, g)
	if !st.Redis.Configured || st.Redis.RateLimit != "up" || len(st.Problems) != 0 {
		t.Errorf("with Redis up: redis %+v, problems %q", st.Redis, st.Problems)
	}
	r.Kill()
	g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Faxgate-Caller", "billing")
	st, _ = getStatus(t, g)
	if st.Redis.RateLimit != "fallback" || !contains(st.Problems, "Redis in fallback: the rate limits are decided by this replica alone") {
		t.Errorf("with Redis gone: redis %+v, problems %q", st.Redis, st.Problems)
	}
}
