package proxy_test

import (
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// authBelowCallers: every loopback peer is svc ("*"), and ops, named by the
// identity header from loopback (a trusted proxy here), is granted the
// sensitive delete too: neither may reach anything below /v1/auth. The
// catch-all extra route matches /v1/auth/x by its parameters, so the test
// also shows that the refusal comes before route matching.
const authBelowCallers = openCallers + `
routes:
  extra:
    - { name: generic.pair, method: PUT, path: "/v1/{a}/{b}" }
`

// authBelowTargets are paths below /v1/auth, where the vendor may serve
// undocumented token operations.
var authBelowTargets = []string{
	"/v1/auth/x",
	"/v1/auth/revoke",
	"/V1/Auth/Refresh",
	"/v1/AUTH/x/y/",
	"/v1/auth/x/",
	"/v1/auth/revoke?token=abc",
}

// TestPathsBelowAuthAreNeverForwarded is the regression test for paths
// below /v1/auth being forwarded as "unmatched" with the gateway's Bearer
// token: every one of them, for every method and caller, whatever
// policy.auth_endpoint and routes.unmatched say, is answered 403
// auth_managed in the envelope and the upstream never sees it. /v1/auth
// itself keeps its answer (refused, or the shim's), and a sibling path
// (/v1/authx) is still forwarded, which shows the upstream's recording
// does see what is forwarded.
func TestPathsBelowAuthAreNeverForwarded(t *testing.T) {
	for _, authEndpoint := range []string{"deny", "shim"} {
		for _, unmatched := range []string{"allow", "deny"} {
			t.Run("auth_endpoint="+authEndpoint+"/unmatched="+unmatched, func(t *testing.T) {
				g := gatewaytest.Start(t, gatewaytest.Options{Config: authBelowCallers +
					"  unmatched: " + unmatched + "\npolicy:\n  auth_endpoint: " + authEndpoint + "\n"})
				before := deniedAuthManaged(t, g)
				refused := 0
				for _, target := range authBelowTargets {
					for _, method := range []string{"GET", "POST", "DELETE", "PATCH", "PUT"} {
						for _, as := range [][]string{nil, {"X-Faxgate-Caller", "ops"}} {
							g.Sim.Reset()
							body := ""
							if method != "GET" {
								body = `{"token":"t"}`
							}
							resp, got := g.Do(t, method, target, body, as...)
							refused++
							if resp.StatusCode != 403 || !strings.Contains(got, `"error":"auth_managed"`) {
								t.Errorf("%s %s (%v): %d %s, want 403 auth_managed", method, target, as, resp.StatusCode, got)
							} else if _, msg, code := gatewaytest.Envelope(t, got); code != "auth_managed" || msg == "" {
								t.Errorf("%s %s: envelope %q", method, target, got)
							}
							if recs := g.Sim.Requests(); len(recs) != 0 {
								t.Errorf("%s %s (%v): the upstream received %s %q", method, target, as, recs[0].Method, recs[0].Path)
							}
							if n := g.Sim.AuthCalls(); n != 0 {
								t.Errorf("%s %s: the upstream counted %d auth calls", method, target, n)
							}
						}
					}
				}
				if got := deniedAuthManaged(t, g) - before; got != float64(refused) {
					t.Errorf("faxgate_denied_total{reason=\"auth_managed\"} rose by %v, want %d", got, refused)
				}

				// /v1/auth itself: refused with deny, answered locally with shim.
				g.Sim.Reset()
				resp, got := g.Do(t, "POST", "/v1/auth/", `{"api_secret_key":"guess"}`)
				switch {
				case authEndpoint == "deny" && (resp.StatusCode != 403 || !strings.Contains(got, `"error":"auth_managed"`)):
					t.Errorf("POST /v1/auth/ with deny: %d %s, want 403 auth_managed", resp.StatusCode, got)
				case authEndpoint == "shim" && (resp.StatusCode != 200 || !strings.Contains(got, `"access_token":"faxgate-managed"`)):
					t.Errorf("POST /v1/auth/ with shim: %d %s, want the shim's placeholder", resp.StatusCode, got)
				}
				if recs := g.Sim.Requests(); len(recs) != 0 {
					t.Errorf("POST /v1/auth/: the upstream received %s %q", recs[0].Method, recs[0].Path)
				}

				// A sibling is not below /v1/auth: unmatched, forwarded as
				// sent (or 404 with unmatched: deny).
				g.Sim.Reset()
				resp, got = g.Do(t, "POST", "/v1/authx", `{}`)
				recs := g.Sim.Requests()
				if unmatched == "allow" {
					if len(recs) != 1 || recs[0].Path != "/v1/authx" || strings.Contains(got, `"error"`) {
						t.Errorf("POST /v1/authx: %d %s, upstream got %d requests; want it forwarded", resp.StatusCode, got, len(recs))
					}
				} else if resp.StatusCode != 404 || !strings.Contains(got, `"error":"unknown_route"`) || len(recs) != 0 {
					t.Errorf("POST /v1/authx with unmatched: deny: %d %s, upstream got %d requests", resp.StatusCode, got, len(recs))
				}
			})
		}
	}
}

// deniedAuthManaged sums faxgate_denied_total{reason="auth_managed"} over
// its callers and routes.
func deniedAuthManaged(t *testing.T, g *gatewaytest.Gateway) float64 {
	t.Helper()
	mfs, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "faxgate_denied_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "auth_managed" {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// isBelowAuth reports whether an upstream reading of a path (see
// upstreamReading) lies below /v1/auth.
func isBelowAuth(reads string) bool {
	return strings.HasPrefix(reads, "/v1/auth/")
}

// targetBelowAuth reports whether a request-target is a path the gateway
// reads as below /v1/auth: origin-form, no fragment, every segment of
// [A-Za-z0-9_-], "/v1/auth/" in any letter case, one trailing slash
// ignored. (A target the gateway refuses as ambiguous is not one.)
func targetBelowAuth(target string) bool {
	p, _, _ := strings.Cut(target, "?")
	if strings.ContainsRune(target, '#') {
		return false
	}
	p = strings.TrimSuffix(p, "/")
	if len(p) <= len("/v1/auth/") || !strings.EqualFold(p[:len("/v1/auth/")], "/v1/auth/") {
		return false
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || strings.Trim(seg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			return false
		}
	}
	return true
}
