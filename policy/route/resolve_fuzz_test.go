package route

import (
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/config"
)

// FuzzResolve checks the property the gateway rests on: the route policy
// decides on is the route that is forwarded, and the forwarded path means
// the same to every reader.
func FuzzResolve(f *testing.F) {
	seeds := []struct{ method, uri string }{
		{"POST", "/v1/numbers/delete"},             // the sensitive route itself
		{"POST", "/V1/NUMBERS/DELETE/"},            // case and trailing slash
		{"POST", "/v1/auth"},                       // the gateway-owned route
		{"POST", "/v1/numbers%2Fdelete"},           // encoded slash
		{"POST", "/v1/numbers/%2e%2e/auth"},        // encoded dot segment
		{"POST", "/v1/x/../numbers/delete"},        // dot segment
		{"POST", "/v1/numbers/./delete"},           // dot segment
		{"POST", "//v1/numbers/delete"},            // scheme-relative
		{"POST", "/v1//numbers/delete"},            // empty segment
		{"POST", "/v1/numbers/delete;x"},           // path parameter
		{"POST", "/v1/numbers\\delete"},            // backslash
		{"POST", "/v1/numbers/d\u0435lete"},        // Cyrillic lookalike
		{"POST", "/v1/numbers\uff0fdelete"},        // fullwidth slash
		{"POST", "/v1/numbers/delete\x00"},         // NUL
		{"POST", "http://x/v1/numbers/delete"},     // absolute-form
		{"OPTIONS", "*"},                           // asterisk-form
		{"CONNECT", "example.com:443"},             // authority-form
		{"POST", "/v1/numbers/delete?_method=GET"}, // method override
		{"GET", "/v1/contacts/list?%5Fmethod=x"},   // encoded override
		{"DELETE", "/v1/esign_templates/ABC/theme"},
		{"PATCH", "/v1/esign_templates/a/fields/b/"},
		{"GET", "/v1/esign_templates/special/theme"}, // fixed beats parameter
		{"DELETE", "/v1/esign_templates/archive/theme"},
		{"GET", "/v1/documents/numbers"},
		{"GET", "/V1"},
		{"GET", "/v1/"},
		{"GET", "/v1/workspace?x=1&y=%ZZ"},
		{"GET", "/"},
		{"GET", ""},
		// Below the token endpoint: the vendor's undocumented token
		// operations may live there, so every spelling is refused with 403
		// auth_managed, even where a catch-all route (generic.*) matches.
		{"POST", "/v1/auth/x"},
		{"DELETE", "/v1/auth/revoke"},
		{"GET", "/V1/Auth/Refresh"},      // case
		{"PATCH", "/v1/AUTH/x/y/"},       // depth and trailing slash
		{"POST", "/v1/auth/x?token=abc"}, // with a query
		{"GET", "/v1/auth/"},             // /v1/auth itself, with its one trailing slash
		{"GET", "/v1/authx/y"},           // a sibling, not below: unmatched
	}
	for _, s := range seeds {
		f.Add(s.method, s.uri)
	}
	tab := newTestTable(f, false)
	deny := newTestTable(f, true)
	// Catch-all parameter routes must never capture the fixed paths of
	// numbers.delete or auth.
	generic, err := NewTable(append(append([]config.Route(nil), testExtras...),
		config.Route{Name: "generic.one", Method: "GET", Path: "/v1/{a}"},
		config.Route{Name: "generic.two", Method: "GET", Path: "/v1/{a}/{b}"},
		config.Route{Name: "generic.three", Method: "POST", Path: "/v1/{a}/{b}/{c}"},
	), false)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, uri string) {
		got := checkResolve(t, tab, method, uri)
		// unmatched: deny changes nothing but the unmatched answer.
		d, err := deny.Resolve(method, uri)
		if got.Route == RouteUnmatched {
			if err == nil || err.Code != CodeUnknownRoute {
				t.Fatalf("deny table: Resolve(%q) = %+v, %v; want unknown_route", uri, d, err)
			}
		} else if d != got {
			t.Fatalf("deny table: Resolve(%q) = %+v, allow table %+v", uri, d, got)
		}
		checkBelowAuth(t, deny, method, uri)
		checkResolve(t, generic, method, uri)
	})
}

// checkResolve resolves uri on tab and checks the properties of a
// successful resolution; it returns the target (zero on a refusal).
func checkResolve(t *testing.T, tab *Table, method, uri string) Target {
	t.Helper()
	got, err := tab.Resolve(method, uri)
	if err != nil {
		if got != (Target{}) {
			t.Fatalf("Resolve(%q) = %+v beside error %v", uri, got, err)
		}
		if err.Status != 400 && err.Status != 404 && err.Code != CodeAuthManaged || err.Code == "" || err.Message == "" {
			t.Fatalf("Resolve(%q) error %+v", uri, err)
		}
		if err.Code == CodeAuthManaged && err.Status != 403 {
			t.Fatalf("Resolve(%q) error %+v, want status 403", uri, err)
		}
		checkBelowAuth(t, tab, method, uri)
		return Target{}
	}
	p := got.Path
	// (a) Only the bytes docs/callers-and-policy.md allows, no empty or dot
	// segments, always under /v1, never a trailing slash.
	if p != "/v1" && !strings.HasPrefix(p, "/v1/") {
		t.Fatalf("Resolve(%q).Path = %q, not under /v1", uri, p)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if !validSegment(seg) {
			t.Fatalf("Resolve(%q).Path = %q has segment %q", uri, p, seg)
		}
	}
	// Decoding or cleaning the path, as an upstream might, changes
	// nothing: there is one reading of it.
	if u, e := url.Parse(p); e != nil || u.Path != p || u.RawPath != "" {
		t.Fatalf("Resolve(%q).Path = %q is read differently by net/url", uri, p)
	}
	if path.Clean(p) != p {
		t.Fatalf("Resolve(%q).Path = %q is changed by path.Clean", uri, p)
	}
	// The forwarded path is the caller's path up to letter case and one
	// trailing slash; the query is the caller's query.
	reqPath, reqQuery, _ := strings.Cut(uri, "?")
	if !strings.EqualFold(p, strings.TrimSuffix(reqPath, "/")) {
		t.Fatalf("Resolve(%q).Path = %q is not the caller's path", uri, p)
	}
	if got.RawQuery != reqQuery {
		t.Fatalf("Resolve(%q).RawQuery = %q", uri, got.RawQuery)
	}
	// (b) Re-resolving what is forwarded gives the same answer.
	fwd := p
	if got.RawQuery != "" {
		fwd += "?" + got.RawQuery
	}
	again, err := tab.Resolve(method, fwd)
	if err != nil || again != got {
		t.Fatalf("Resolve(%q) = %+v but Resolve(%q) = %+v, %v", uri, got, fwd, again, err)
	}
	// (c) No other route reaches the paths of numbers.delete or auth.
	if got.Route != "numbers.delete" && strings.EqualFold(p, "/v1/numbers/delete") {
		t.Fatalf("Resolve(%q) = route %q for the numbers.delete path", uri, got.Route)
	}
	if got.Route != "auth" && strings.EqualFold(p, "/v1/auth") {
		t.Fatalf("Resolve(%q) = route %q for the auth path", uri, got.Route)
	}
	if got.Route == "numbers.delete" && p != "/v1/numbers/delete" || got.Route == "auth" && p != "/v1/auth" {
		t.Fatalf("Resolve(%q) = %+v: wrong path for the route", uri, got)
	}
	// No path below /v1/auth resolves to a route, forwardable or not.
	if isBelowAuth(p) {
		t.Fatalf("Resolve(%s %q) = %+v: a path below /v1/auth resolved", method, uri, got)
	}
	// MethodOK means the named route has this method.
	if got.Route != RouteUnmatched {
		found := false
		for _, r := range tab.Routes() {
			if r.Name == got.Route {
				found = true
				if got.MethodOK != (r.Method == method) {
					t.Fatalf("Resolve(%s %q) = %+v, but route %s is %s", method, uri, got, r.Name, r.Method)
				}
			}
		}
		if !found {
			t.Fatalf("Resolve(%q) = unknown route %q", uri, got.Route)
		}
	}
	return got
}

// isBelowAuth reports whether the path p lies below /v1/auth, read the way
// routing reads it: ASCII case ignored, one trailing slash ignored.
func isBelowAuth(p string) bool {
	p = strings.TrimSuffix(p, "/")
	return len(p) > len("/v1/auth/") && strings.EqualFold(p[:len("/v1/auth/")], "/v1/auth/")
}

// checkBelowAuth: a request-target whose path is valid and below /v1/auth is
// refused with 403 auth_managed, never resolved, whatever the method and
// the routes of tab. (An invalid one may be refused with 400 first.)
func checkBelowAuth(t *testing.T, tab *Table, method, uri string) {
	t.Helper()
	p, _, _ := strings.Cut(uri, "?")
	if !isBelowAuth(p) || strings.ContainsRune(uri, '#') {
		return
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p, "/")[1:], "/") {
		if !validSegment(seg) {
			return
		}
	}
	got, err := tab.Resolve(method, uri)
	switch {
	case err == nil:
		t.Fatalf("Resolve(%s %q) = %+v; a path below /v1/auth must be refused with auth_managed", method, uri, got)
	case err.Code == CodeInvalidRequest:
		// The query was refused (a _method key); nothing is forwarded.
	case err.Code != CodeAuthManaged || err.Status != 403:
		t.Fatalf("Resolve(%s %q) error %+v, want 403 auth_managed", method, uri, err)
	}
}
