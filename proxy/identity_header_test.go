package proxy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/policy/routetable"
)

// The identity header never reaches the upstream, whatever the spelling
// of its name in the config or in the request, from a trusted peer (whose
// header names the caller) or an untrusted one (whose header is a forgery).
// Regression: a config spelling other than Go's canonical one
// ("x-faxgate-caller") was compared as written with canonical request
// names, so the header was neither stripped nor caught by the underscore
// rule, and the vendor received every caller's identity.
func TestIdentityHeaderNeverForwardedInAnySpelling(t *testing.T) {
	configSpellings := []string{"x-faxgate-caller", "X-FAXGATE-CALLER", "x-FaXgAtE-cAlLeR", "X-Faxgate-Caller"}
	peers := []struct {
		name    string
		trusted string
	}{
		{"trusted", "127.0.0.0/8"},
		{"untrusted", "10.255.0.0/16"},
	}
	// requestSpellings: the name as the caller writes it on the wire, and
	// whether a trusted peer's value names the caller (Go's server
	// canonicalises the first two to the configured header; an underscore
	// spelling is another header name, believed by nobody, stripped all
	// the same).
	requestSpellings := []struct {
		name     string
		believed bool
	}{
		{"X-Faxgate-Caller", true},
		{"x-faxgate-caller", true},
		{"X-FAXGATE-CALLER", true},
		{"x_faxgate_caller", false},
		{"X_Faxgate_Caller", false},
		{"x-faxgate_caller", false},
	}
	for _, cs := range configSpellings {
		for _, peer := range peers {
			t.Run(fmt.Sprintf("config %s/%s peer", cs, peer.name), func(t *testing.T) {
				g := gatewaytest.Start(t, gatewaytest.Options{Config: fmt.Sprintf(`
callers:
  identity_header: %q
  trusted_proxies: [%q]
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
    - name: ops
      header_values: ["ops"]
      allow: ["*"]
rate_limit:
  default: { rps: 10000, burst: 10000 }
`, cs, peer.trusted)})
				for i, rs := range requestSpellings {
					g.Sim.Reset()
					id := fmt.Sprintf("spelling-%d", i)
					out := g.Raw(t, post("/v1/contacts/list", `{}`, rs.name+": ops", "X-Request-Id: "+id), rawTimeout)
					if !strings.HasPrefix(out, "HTTP/1.1 200 ") {
						t.Fatalf("%s: want 200, got %q", rs.name, out)
					}
					recs := g.Sim.Requests()
					if len(recs) != 1 {
						t.Fatalf("%s: the upstream received %d requests, want 1", rs.name, len(recs))
					}
					for k, v := range recs[0].Header {
						if routetable.FoldedHeaderName(k) == "X-Faxgate-Caller" || strings.Contains(strings.ToLower(k), "caller") {
							t.Errorf("%s: the upstream received %s: %q", rs.name, k, v)
						}
					}
					checkForwardedHeaders(t, recs[0])
					wantCaller := "svc"
					if rs.believed && peer.name == "trusted" {
						wantCaller = "ops"
					}
					if got := callerOf(t, g, id); got != wantCaller {
						t.Errorf("%s: caller %q, want %q", rs.name, got, wantCaller)
					}
				}
			})
		}
	}
}

// callerOf is the caller of the access line of the request with this ID.
func callerOf(t *testing.T, g *gatewaytest.Gateway, id string) string {
	t.Helper()
	off := 0
	line := accessLine(t, g, id, &off, true)
	c, _ := line["caller"].(string)
	return c
}
