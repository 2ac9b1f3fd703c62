package policy

import (
	"net/http"
	"testing"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy/route"
)

// authBelowPaths are spellings of paths below the token endpoint: the
// vendor's undocumented token operations may live there, so none of them
// may ever reach it with the gateway's token (docs/security.md).
var authBelowPaths = []string{
	"/v1/auth/x",
	"/v1/auth/revoke",
	"/V1/Auth/Refresh",
	"/v1/AUTH/x/y/",
	"/v1/auth/x/",
	"/v1/auth/token/introspect/now",
	"/v1/auth/revoke?token=abc",
	"/v1/auth/faxes",     // a segment an extra route uses elsewhere
	"/v1/auth/documents", // below auth, where /v1/{a}/{b} would match
}

// authBelowMethods covers every method the gateway forwards: sensitivity of
// the token endpoint's subtree follows the path, whatever the method.
var authBelowMethods = []string{"GET", "POST", "DELETE", "PATCH", "PUT"}

// authBelowExtras add catch-all parameter routes that would otherwise match
// /v1/auth/... by accident, so the refusal is shown to come before route
// matching and not only for unmatched paths.
const authBelowExtras = `
  extra:
    - { name: generic.one, method: GET, path: "/v1/{a}" }
    - { name: generic.two, method: POST, path: "/v1/{a}/{b}" }
    - { name: generic.three, method: DELETE, path: "/v1/{a}/{b}/{c}" }
    - { name: faxes.send, method: POST, path: /v1/faxes/send }
`

// TestResolveRefusesPathsBelowAuth: every path below /v1/auth/ is refused
// with 403 auth_managed for every method, whatever policy.auth_endpoint and
// routes.unmatched say, and whether or not some route's parameters would
// match it. /v1/auth itself and its sibling /v1/authx keep their own
// answers.
func TestResolveRefusesPathsBelowAuth(t *testing.T) {
	for _, authEndpoint := range []string{"deny", "shim"} {
		for _, unmatched := range []string{"allow", "deny"} {
			for _, extras := range []string{"", authBelowExtras} {
				name := "auth_endpoint=" + authEndpoint + "/unmatched=" + unmatched
				if extras != "" {
					name += "/catch-all extras"
				}
				t.Run(name, func(t *testing.T) {
					r := compileYAML(t, "policy:\n  auth_endpoint: "+authEndpoint+"\nroutes:\n  unmatched: "+unmatched+"\n"+extras)
					for _, p := range authBelowPaths {
						for _, m := range authBelowMethods {
							tgt, err := r.Resolve(m, p)
							if err == nil {
								t.Errorf("Rules.Resolve(%s %s) = %+v, want 403 auth_managed", m, p, tgt)
								continue
							}
							if err.Status != http.StatusForbidden || err.Code != "auth_managed" || err.Message == "" {
								t.Errorf("Rules.Resolve(%s %s) error = %d %v, want 403 auth_managed", m, p, err.Status, err)
							}
							if tgt != (route.Target{}) {
								t.Errorf("Rules.Resolve(%s %s) returned %+v beside its error", m, p, tgt)
							}
							// The table alone refuses it too: nothing that
							// resolves without policy can forward it.
							if tgt, err := r.Table.Resolve(m, p); err == nil || err.Code != "auth_managed" || err.Status != http.StatusForbidden {
								t.Errorf("Table.Resolve(%s %s) = %+v, %v; want 403 auth_managed", m, p, tgt, err)
							}
						}
					}

					// /v1/auth itself, in its spellings, is still the auth
					// route: the handler refuses it (deny) or answers it
					// locally (shim).
					for _, p := range []string{"/v1/auth", "/V1/AUTH", "/v1/auth/", "/v1/Auth/?x=1"} {
						for _, m := range authBelowMethods {
							tgt, err := r.Resolve(m, p)
							if err != nil || tgt.Route != route.RouteAuth || tgt.Path != "/v1/auth" || tgt.MethodOK != (m == "POST") {
								t.Errorf("Rules.Resolve(%s %s) = %+v, %v; want route auth", m, p, tgt, err)
							}
						}
					}

					// A sibling is not below /v1/auth: unmatched as before
					// (404 with unmatched: deny), or the catch-all extra
					// that matches it.
					for _, p := range []string{"/v1/authx", "/v1/auth-x", "/v1/authx/y", "/v1/x/auth/y"} {
						tgt, err := r.Resolve("PATCH", p)
						switch {
						case err != nil && err.Code == "auth_managed":
							t.Errorf("Rules.Resolve(PATCH %s) = %v; a sibling of /v1/auth is not below it", p, err)
						case extras != "":
							if err != nil || tgt.Route == route.RouteUnmatched {
								t.Errorf("Rules.Resolve(PATCH %s) = %+v, %v; want a catch-all route", p, tgt, err)
							}
						case unmatched == "allow" && (err != nil || tgt.Route != route.RouteUnmatched):
							t.Errorf("Rules.Resolve(PATCH %s) = %+v, %v; want unmatched", p, tgt, err)
						case unmatched == "deny" && (err == nil || err.Code != route.CodeUnknownRoute):
							t.Errorf("Rules.Resolve(PATCH %s) = %+v, %v; want 404 unknown_route", p, tgt, err)
						}
					}
				})
			}
		}
	}
}

// Validation is not all that stands between a route below /v1/auth and the
// upstream: a table built from unvalidated input refuses it too.
func TestNewTableRefusesRoutesBelowAuth(t *testing.T) {
	for _, p := range []string{"/v1/auth/x", "/v1/Auth/revoke", "/v1/auth/{id}"} {
		if _, err := route.NewTable([]config.Route{{Name: "x.y", Method: "POST", Path: p}}, false); err == nil {
			t.Errorf("NewTable accepted a route on %s", p)
		}
	}
	if _, err := route.NewTable([]config.Route{{Name: "authx", Method: "POST", Path: "/v1/authx/y"}}, false); err != nil {
		t.Errorf("NewTable refused a route beside /v1/auth: %v", err)
	}
}
