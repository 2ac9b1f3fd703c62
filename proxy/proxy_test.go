package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// openCallers identifies every loopback peer as "svc" (allowed everything but
// sensitive routes) and trusts loopback as a proxy, so tests can speak as
// "ops" (granted numbers.delete) with the identity header.
const openCallers = `
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
    - name: ops
      header_values: ["ops"]
      allow: ["*", "numbers.delete"]
rate_limit:
  default: { rps: 1000, burst: 1000 }
log:
  level: debug
`

func lastRecorded(t *testing.T, sim *faxsim.Sim) faxsim.Recorded {
	t.Helper()
	reqs := sim.Requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream received nothing")
	}
	return reqs[len(reqs)-1]
}

func TestEveryDocumentedEndpointIsForwarded(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	for _, tc := range []struct {
		method, path, body string
		hdr                []string
		want               int
	}{
		{"POST", "/v1/contacts/create", `{"type":"individual","is_organization":false,"first_name":"A","last_name":"B"}`, nil, 200},
		{"POST", "/v1/contacts/list", `{}`, nil, 200},
		{"POST", "/v1/contacts/details", `{"id":"Y29udGFjdC0wMDAx"}`, nil, 200},
		{"POST", "/v1/numbers/filled_requirements", `{"country_code":"US"}`, nil, 200},
		{"POST", "/v1/numbers/available-list", `{"country_code":"US","code":"415"}`, nil, 200},
		{"GET", "/v1/esign_templates", "", nil, 200},
		{"GET", "/v1/esign_templates/tpl_1/field_rule", "", nil, 200},
		{"POST", "/v1/esign_templates/tpl_1/fields", `{"fields":[{"type":"text","title":"Name","page":1}]}`, nil, 200},
		{"DELETE", "/v1/esign_templates/tpl_1/theme", "", nil, 200},
		{"POST", "/v1/numbers/delete", `{"number_id":"num_1002","order_id":"ord_5002"}`,
			[]string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1002"}, 200},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			resp, body := g.Do(t, tc.method, tc.path, tc.body, tc.hdr...)
			if resp.StatusCode != tc.want {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.want, body)
			}
			rec := lastRecorded(t, g.Sim)
			if rec.Method != tc.method || rec.Path != tc.path {
				t.Fatalf("upstream got %s %s, want %s %s", rec.Method, rec.Path, tc.method, tc.path)
			}
			if a := rec.Header.Get("Authorization"); !strings.HasPrefix(a, "Bearer ") || len(a) < 20 {
				t.Fatalf("upstream Authorization = %q, want the gateway's Bearer token", a)
			}
		})
	}
	// Multipart upload streams through unchanged.
	body := "--XX\r\nContent-Disposition: form-data; name=\"file_name\"\r\n\r\nscan.pdf\r\n--XX\r\nContent-Disposition: form-data; name=\"file_data\"\r\n\r\nJVBERi0x\r\n--XX--\r\n"
	req, _ := http.NewRequest("POST", g.URL+"/v1/contacts/upload-patient-doc", strings.NewReader(body))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=XX")
	resp, err := g.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload status = %d", resp.StatusCode)
	}
	if got := string(lastRecorded(t, g.Sim).Body); got != body {
		t.Fatalf("upload body changed on the way: %q", got)
	}
}

func TestCallerCredentialsAndForgeableHeadersAreStripped(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	resp, body := g.Do(t, "POST", "/v1/contacts/list?limit=1", `{}`,
		"Authorization", "Bearer caller-token",
		"Proxy-Authorization", "Basic Zm9vOmJhcg==",
		"Cookie", "session=1",
		"X-Api-Key", "caller-key",
		"Api-Key", "caller-key",
		"X-Auth-Token", "caller-token",
		"X-Access-Token", "caller-token",
		"Forwarded", "for=1.2.3.4",
		"X-Forwarded-For", "1.2.3.4",
		"X-Forwarded-Host", "evil",
		"X-Forwarded-Proto", "https",
		"X-Forwarded-Prefix", "/admin",
		"X-Real-IP", "1.2.3.4",
		"X-HTTP-Method-Override", "DELETE",
		"X-HTTP-Method", "DELETE",
		"X-Method-Override", "DELETE",
		"X-Original-URL", "/v1/numbers/delete",
		"X-Rewrite-URL", "/v1/numbers/delete",
		"X-Override-URL", "/v1/numbers/delete",
		"X-Original-URI", "/v1/numbers/delete",
		"X-Envoy-Original-Path", "/v1/numbers/delete",
		"X-Faxgate-Caller", "ops",
		"X-Forwarded-Client-Cert", "URI=spiffe://x/ops",
		"Connection", "X-Secret-Hop",
		"X-Secret-Hop", "1",
		"Keep-Alive", "timeout=5",
		"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"X-Custom", "kept",
	)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	rec := lastRecorded(t, g.Sim)
	for _, h := range []string{"Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key", "X-Auth-Token", "X-Access-Token",
		"X-Override-Url", "Forwarded", "X-Forwarded-For",
		"X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Prefix", "X-Real-Ip", "X-Http-Method-Override",
		"X-Http-Method", "X-Method-Override", "X-Original-Url", "X-Rewrite-Url", "X-Original-Uri",
		"X-Envoy-Original-Path", "X-Faxgate-Caller",
		"X-Forwarded-Client-Cert", "X-Secret-Hop", "Keep-Alive", "Connection"} {
		if v, ok := rec.Header[h]; ok {
			t.Errorf("upstream received %s: %q", h, v)
		}
	}
	if got := rec.Header.Values("Authorization"); len(got) != 1 || got[0] == "Bearer caller-token" {
		t.Errorf("upstream Authorization = %q, want exactly the gateway's token", got)
	}
	if rec.Header.Get("traceparent") == "" || rec.Header.Get("X-Custom") != "kept" {
		t.Errorf("traceparent / X-Custom not passed through: %v", rec.Header)
	}
	if rec.RawQuery != "limit=1" {
		t.Errorf("query = %q, want forwarded unchanged", rec.RawQuery)
	}
}

func TestAuthEndpointIsNeverForwarded(t *testing.T) {
	for _, mode := range []string{"deny", "shim"} {
		t.Run(mode, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + "policy:\n  auth_endpoint: " + mode + "\n"})
			before := g.Sim.AuthCalls()
			for _, p := range []string{"/v1/auth", "/V1/AUTH", "/v1/auth/", "/v1/Auth"} {
				resp, body := g.Do(t, "POST", p, `{"api_secret_key":"guess"}`, "X-Faxgate-Caller", "ops")
				if mode == "deny" {
					if _, _, code := gatewaytest.Envelope(t, body); resp.StatusCode != 403 || code != "auth_managed" {
						t.Fatalf("%s: %d %s, want 403 auth_managed", p, resp.StatusCode, body)
					}
				} else if resp.StatusCode != 200 || !strings.Contains(body, `"access_token":"faxgate-managed"`) {
					t.Fatalf("%s: %d %s, want the shim's placeholder token", p, resp.StatusCode, body)
				}
			}
			if got := g.Sim.AuthCalls(); got != before {
				t.Fatalf("upstream auth calls went from %d to %d: a caller's auth call was forwarded", before, got)
			}
		})
	}
}

func TestPathsAreResolvedToOneCanonicalRoute(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	for _, tc := range []struct {
		target   string
		status   int
		code     string
		upstream string // path the upstream must have received; "" = nothing forwarded
	}{
		{"/V1/Contacts/List/", 200, "", "/v1/contacts/list"},
		{"/v1/contacts/list%2F", 400, "invalid_path", ""},
		{"/v1/./contacts/list", 400, "invalid_path", ""},
		{"/v1//contacts/list", 400, "invalid_path", ""},
		{"/v1/contacts/list;x=1", 400, "invalid_path", ""},
		{"/v1/contacts/list.json", 400, "invalid_path", ""},
		{"/admin", 404, "unknown_route", ""},
		{"/", 404, "unknown_route", ""},
		{"/v1/contacts/list?_method=DELETE", 400, "invalid_request", ""},
		{"/v1/faxes/received", 404, "", "/v1/faxes/received"}, // unmatched: forwarded, faxsim says 404
	} {
		t.Run(tc.target, func(t *testing.T) {
			n := len(g.Sim.Requests())
			resp, body := g.Do(t, "POST", tc.target, `{}`)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d; %s", resp.StatusCode, tc.status, body)
			}
			if tc.code != "" {
				if _, _, code := gatewaytest.Envelope(t, body); code != tc.code {
					t.Fatalf("error = %q, want %q", code, tc.code)
				}
			}
			reqs := g.Sim.Requests()
			switch {
			case tc.upstream == "" && len(reqs) != n:
				t.Fatalf("forwarded %s although refused", reqs[len(reqs)-1].Path)
			case tc.upstream != "" && (len(reqs) != n+1 || reqs[n].Path != tc.upstream):
				t.Fatalf("upstream did not receive exactly %s", tc.upstream)
			}
		})
	}
}

func TestNumbersDeletePolicy(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	const body = `{"number_id":"num_1001","order_id":"ord_5001"}`
	for _, tc := range []struct {
		name   string
		method string
		body   string
		path   string
		hdr    []string
		status int
		code   string
	}{
		{"star never grants it", "POST", body, "/v1/numbers/delete", nil, 403, "forbidden"},
		{"method override cannot reach it", "GET", "", "/v1/numbers/delete", []string{"X-HTTP-Method-Override", "POST"}, 403, "forbidden"},
		{"granted but wrong method", "DELETE", body, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops"}, 405, "method_not_allowed"},
		{"granted without confirmation", "POST", body, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops"}, 428, "confirmation_required"},
		{"granted with wrong confirmation", "POST", body, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1002"}, 428, "confirmation_required"},
		{"duplicate key", "POST", `{"number_id":"num_1002","number_id":"num_1001","order_id":"ord_5001"}`, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1002"}, 400, "invalid_request"},
		{"case-folded duplicate key", "POST", `{"number_id":"num_1002","Number_ID":"num_1001"}`, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1002"}, 400, "invalid_request"},
		{"query string", "POST", body, "/v1/numbers/delete?number_id=num_1002", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1001"}, 400, "invalid_request"},
		{"not json", "POST", `number_id=num_1001`, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1001"}, 400, "invalid_request"},
		{"json body sent as a form", "POST", body, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1001", "Content-Type", "application/x-www-form-urlencoded"}, 400, "invalid_request"},
		{"two content types", "POST", body, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1001", "Content-Type", "application/json", "Content-Type", "text/plain"}, 400, "invalid_request"},
		{"confirmation header twice", "POST", body, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1001", "X-Faxgate-Confirm", "num_1001"}, 428, "confirmation_required"},
		{"identity header value matches exactly", "POST", body, "/v1/numbers/delete", []string{"X-Faxgate-Caller", "OPS", "X-Faxgate-Confirm", "num_1001"}, 403, "forbidden"},
		{"granted and confirmed", "POST", body, "/V1/NUMBERS/DELETE/", []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1001"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := g.Sim.RouteCounts()["POST /v1/numbers/delete"]
			resp, got := g.Do(t, tc.method, tc.path, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tc.status, got)
			}
			if tc.code != "" {
				if _, _, code := gatewaytest.Envelope(t, got); code != tc.code {
					t.Fatalf("error = %q, want %q", code, tc.code)
				}
				if m := g.Sim.RouteCounts()["POST /v1/numbers/delete"]; m != n {
					t.Fatal("the upstream received the delete although it was refused")
				}
			}
		})
	}
	if owned := g.Sim.OwnedNumbers(); len(owned) != 2 {
		t.Fatalf("owned numbers = %d, want 2 (exactly one deleted)", len(owned))
	}
	audits := g.LogLines("audit")
	if len(audits) != 14 {
		t.Fatalf("audit lines = %d, want one per numbers.delete request (14)", len(audits))
	}
	last := audits[len(audits)-1]
	if last["decision"] != "forwarded" || last["caller"] != "ops" || last["number_id"] != "num_1001" || last["order_id"] != "ord_5001" {
		t.Fatalf("audit line of the allowed delete = %v", last)
	}
	if first := audits[0]; first["decision"] != "denied" || first["reason"] != "forbidden" || first["caller"] != "svc" {
		t.Fatalf("audit line of the denied delete = %v", first)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.Denied.WithLabelValues("svc", "numbers.delete", "forbidden")); got != 3 {
		t.Fatalf("faxgate_denied_total{svc,numbers.delete,forbidden} = %v, want 3", got)
	}
}

func TestUnidentifiedCallerIsRefused(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
callers:
  list:
    - name: far
      cidrs: ["10.0.0.0/8"]
      allow: ["*"]
`})
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Faxgate-Caller", "far")
	if _, _, code := gatewaytest.Envelope(t, body); resp.StatusCode != 403 || code != "unidentified_caller" {
		t.Fatalf("%d %s, want 403 unidentified_caller", resp.StatusCode, body)
	}
	if n := len(g.Sim.Requests()); n != 1 { // the gateway's own auth call only
		t.Fatalf("upstream saw %d requests, want only the token call", n)
	}
}

func TestRateLimitPerCaller(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
      rate_limit: { rps: 0.5, burst: 2 }
`})
	for i := range 2 {
		resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if resp.Header.Get("RateLimit-Limit") != "2" || resp.Header.Get("RateLimit-Remaining") != []string{"1", "0"}[i] {
			t.Fatalf("request %d: RateLimit-Limit %q Remaining %q", i, resp.Header.Get("RateLimit-Limit"), resp.Header.Get("RateLimit-Remaining"))
		}
	}
	// A different path, method or source port is still the same caller's bucket.
	resp, body := g.Do(t, "GET", "/v1/esign_templates", "")
	if _, msg, code := gatewaytest.Envelope(t, body); resp.StatusCode != 429 || code != "rate_limited" || msg != "rate limit exceeded for caller svc" {
		t.Fatalf("%d %s, want 429 rate_limited", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "2" {
		t.Fatalf("Retry-After = %q, want 2 (0.5 rps, rounded up)", ra)
	}
	if resp.Header.Get("RateLimit-Remaining") != "0" || resp.Header.Get("RateLimit-Reset") == "" {
		t.Fatalf("RateLimit headers on 429: %v", resp.Header)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.RateLimited.WithLabelValues("svc")); got != 1 {
		t.Fatalf("faxgate_rate_limited_total{svc} = %v, want 1", got)
	}
}
