package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// paramBelowCallers: an extra route with a parameter where numbers.delete
// has its fixed "delete" segment. svc is allowed "*", never numbers.delete.
const paramBelowCallers = untrustedCallers + `
routes:
  extra:
    - { name: numbers.status, method: POST, path: "/v1/numbers/{numberId}/status" }
`

// TestParamRouteBelowSensitivePathIsRefused: /v1/numbers/delete/status lies
// below the sensitive route's path. It must be refused with 403 like every
// other path below it (docs/security.md): an upstream that routes by
// prefix reads it as the delete. Matching it to an extra route through a
// parameter must not forward it.
func TestParamRouteBelowSensitivePathIsRefused(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: paramBelowCallers})
	runAttacks(t, g, []attack{
		{name: "below delete via parameter route", raw: post("/v1/numbers/delete/status", deleteBody),
			want: []reply{gw(403, "forbidden")}},
		{name: "below delete via parameter route, other case", raw: post("/V1/Numbers/DELETE/status/", deleteBody),
			want: []reply{gw(403, "forbidden")}},
		{name: "parameter route itself", raw: post("/v1/numbers/num_1001/status", deleteBody),
			want: []reply{relayed(404)}, forward: "/v1/numbers/num_1001/status"},
	})
}

// TestUnderscoreSpellingsOfStrippedHeadersAreStripped: a CGI-style upstream
// reads X_Http_Method_Override as X-Http-Method-Override (both become
// HTTP_X_HTTP_METHOD_OVERRIDE), so the underscore spelling of every stripped
// header is stripped too (docs/security.md, Nothing forgeable passes).
func TestUnderscoreSpellingsOfStrippedHeadersAreStripped(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: untrustedCallers})
	const list = "/v1/contacts/list"
	for _, h := range []string{"X_Http_Method_Override: DELETE", "x_http_method: DELETE", "X_Method_Override: DELETE",
		"X_Original_URL: /v1/numbers/delete", "X_Rewrite_Url: /v1/numbers/delete", "X_Override_Url: /v1/numbers/delete",
		"X_Api_Key: k", "Api_Key: k", "X_Auth_Token: t", "X_Access_Token: t", "X_Forwarded_For: 10.0.0.1",
		"X_Faxgate_Caller: ops", "X_Faxgate_Confirm: num_1001", "X-Forwarded_Prefix: /v1/numbers/delete"} {
		g.Sim.Reset()
		out := g.Raw(t, post(list, `{}`, h), rawTimeout)
		if got := readAnswers(t, out); len(got) != 1 || got[0].status != 200 {
			t.Fatalf("%s: %q", h, out)
		}
		recs := g.Sim.Requests()
		if len(recs) != 1 {
			t.Fatalf("%s: %d upstream requests", h, len(recs))
		}
		name, _, _ := strings.Cut(h, ":")
		if v, ok := recs[0].Header[http.CanonicalHeaderKey(name)]; ok {
			t.Errorf("the upstream received %s: %q", name, v)
		}
	}
}
