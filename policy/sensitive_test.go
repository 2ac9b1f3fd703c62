package policy

import (
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy/route"
)

func compileYAML(t *testing.T, yaml string) *Rules {
	t.Helper()
	cfg, err := config.Parse([]byte("upstream:\n  base_url: https://api.example.com\n  api_key_env: K\n"+yaml),
		func(string) (string, bool) { return "k", true })
	if err != nil {
		t.Fatal(err)
	}
	r, err := Compile(cfg.RuleSections(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const sensitiveYAML = `
  extra:
    - name: faxes.purge
      method: POST
      path: "/v1/faxes/{faxId}/purge"
    - name: faxes.get
      method: GET
      path: "/v1/faxes/{faxId}"
policy:
  sensitive: [numbers.delete, faxes.purge, esign.theme.delete]
`

// Unmatched paths below a sensitive route's path are refused with 403
// (docs/callers-and-policy.md), for built-in and extra routes, parameters and
// letter case included, whatever routes.unmatched says; other paths are
// resolved as before.
func TestRulesResolveRefusesPathsBelowSensitiveRoutes(t *testing.T) {
	for _, unmatched := range []string{"allow", "deny"} {
		r := compileYAML(t, "routes:\n  unmatched: "+unmatched+sensitiveYAML)
		for _, tc := range []struct {
			target string
			route  string // "" with code set: refused
			code   string
		}{
			{"/v1/numbers/delete/x", "", route.CodeForbidden},
			{"/V1/numbers/DELETE/x/y", "", route.CodeForbidden},
			{"/v1/numbers/delete/x/", "", route.CodeForbidden},
			{"/v1/numbers/delete", "numbers.delete", ""},
			{"/V1/Numbers/Delete/", "numbers.delete", ""},
			{"/v1/faxes/f1/purge/x", "", route.CodeForbidden},
			{"/v1/FAXES/f1/PURGE/x/y/z", "", route.CodeForbidden},
			{"/v1/faxes/f1/purge", "faxes.purge", ""},
			{"/v1/faxes/f1", "faxes.get", ""},
			{"/v1/esign_templates/t1/theme/x", "", route.CodeForbidden},
			{"/v1/esign_templates/t1/theme", "esign.theme.delete", ""},
			// Not below a sensitive path: unmatched, or 404 with unmatched: deny.
			{"/v1/numbers/deletex", route.RouteUnmatched, ""},
			{"/v1/numbers", route.RouteUnmatched, ""},
			{"/v1/faxes/f1/x", route.RouteUnmatched, ""},
			{"/v1/esign_templates/t1/fields/a/b", route.RouteUnmatched, ""},
			{"/v1/contacts/list/x", route.RouteUnmatched, ""},
		} {
			tgt, err := r.Resolve("POST", tc.target)
			want := tc.route
			if want == route.RouteUnmatched && unmatched == "deny" {
				want, tc.code = "", route.CodeUnknownRoute
			}
			switch {
			case want == "" && (err == nil || err.Code != tc.code):
				t.Errorf("unmatched %s: %s resolved to %q, %v; want %s", unmatched, tc.target, tgt.Route, err, tc.code)
			case want == "" && tc.code == route.CodeForbidden && err.Status != 403:
				t.Errorf("%s: status %d, want 403", tc.target, err.Status)
			case want != "" && (err != nil || tgt.Route != want):
				t.Errorf("unmatched %s: %s resolved to %q, %v; want %s", unmatched, tc.target, tgt.Route, err, want)
			}
		}
	}
	// Without sensitive routes nothing is refused for lying below one.
	r := compileYAML(t, "policy:\n  sensitive: []\n  confirm: []\n")
	if tgt, err := r.Resolve("POST", "/v1/numbers/delete/x"); err != nil || tgt.Route != route.RouteUnmatched {
		t.Fatalf("with no sensitive route: %q, %v", tgt.Route, err)
	}
}

func TestAuditIDs(t *testing.T) {
	for _, tc := range []struct{ body, number, order string }{
		{`{"number_id":"num_1","order_id":"ord_1"}`, "num_1", "ord_1"},
		{`{"order_id":"ord_1","number_id":"num_1","x":[1,{"number_id":"nested"}]}`, "num_1", "ord_1"},
		{`{"number_id":1003}`, "1003", ""},
		{`{"number_id":"a","number_id":"b","number_id":"a"}`, "a,b", ""},
		{`{"number_id":{"$ne":""},"order_id":null}`, "", ""},
		{`{"Number_ID":"x"}`, "", ""},
		{`{"number_id":"num_1"} trailing`, "num_1", ""},
		{`{"number_id":"num_1","order_id":`, "num_1", ""},
		{`[{"number_id":"num_1"}]`, "", ""},
		{`number_id=num_1`, "", ""},
		{``, "", ""},
	} {
		if n, o := AuditIDs([]byte(tc.body)); n != tc.number || o != tc.order {
			t.Errorf("AuditIDs(%s) = %q, %q; want %q, %q", tc.body, n, o, tc.number, tc.order)
		}
	}
}

// A route that matches a path below a sensitive route's path only through a
// parameter (or a fixed segment where the sensitive route has a parameter)
// is refused there with 403; a route configured below the sensitive
// route's own pattern, and every other path of the route, resolve as before.
func TestRulesResolveRefusesRoutesReachingBelowSensitiveRoutes(t *testing.T) {
	r := compileYAML(t, `
routes:
  extra:
    - { name: numbers.status, method: POST, path: "/v1/numbers/{numberId}/status" }
    - { name: numbers.delete.preview, method: POST, path: "/v1/numbers/delete/preview" }
    - { name: faxes.purge, method: POST, path: "/v1/faxes/{faxId}/purge" }
    - { name: faxes.archive.purge_all, method: POST, path: "/v1/faxes/archive/purge/all" }
    - { name: faxes.purge.log, method: GET, path: "/v1/faxes/{id}/purge/log" }
policy:
  sensitive: [numbers.delete, faxes.purge]
`)
	for _, tc := range []struct {
		target, route string // route "": refused with 403
	}{
		{"/v1/numbers/delete/status", ""},
		{"/V1/NUMBERS/Delete/status/", ""},
		{"/v1/numbers/n1/status", "numbers.status"},
		{"/v1/numbers/delete/preview", "numbers.delete.preview"},
		{"/v1/numbers/delete", "numbers.delete"},
		{"/v1/faxes/archive/purge/all", ""},
		{"/v1/faxes/f1/purge/log", "faxes.purge.log"},
	} {
		tgt, err := r.Resolve("POST", tc.target)
		switch {
		case tc.route == "" && (err == nil || err.Code != route.CodeForbidden):
			t.Errorf("%s: got route %q, err %v; want 403 forbidden", tc.target, tgt.Route, err)
		case tc.route != "" && (err != nil || tgt.Route != tc.route):
			t.Errorf("%s: got route %q, err %v; want %s", tc.target, tgt.Route, err, tc.route)
		}
	}
}
