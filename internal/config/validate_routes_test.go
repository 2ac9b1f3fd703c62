package config

import (
	"testing"

	"github.com/faxgate/faxgate/policy/routetable"
)

func TestBuiltinRoutes(t *testing.T) {
	rs := BuiltinRoutes()
	if len(rs) != 13 || rs[0] != (Route{Name: "auth", Method: "POST", Path: "/v1/auth"}) {
		t.Fatalf("BuiltinRoutes() = %v; want 13 routes, auth first", rs)
	}
	names := map[string]bool{}
	shapes := map[string]bool{}
	for _, r := range rs {
		if !routeNameRE.MatchString(r.Name) || !routetable.IsMethod(r.Method) || !validRoutePath(r.Path) {
			t.Errorf("built-in route %v would not pass as an extra route", r)
		}
		if names[r.Name] || shapes[routeShape(r.Method, r.Path)] {
			t.Errorf("built-in route %v is a duplicate", r)
		}
		names[r.Name], shapes[routeShape(r.Method, r.Path)] = true, true
	}
	rs[0].Name = "changed"
	if BuiltinRoutes()[0].Name != "auth" {
		t.Errorf("BuiltinRoutes shares its slice with callers")
	}
}

func TestValidRoutePath(t *testing.T) {
	for p, want := range map[string]bool{
		"/v1/faxes":               true,
		"/v1/faxes/{faxId}/pages": true,
		"/v1/a_b-C9":              true,
		"/v1/":                    false,
		"/v1":                     false,
		"/v2/faxes":               false,
		"v1/faxes":                false,
		"/v1/faxes/":              false,
		"/v1//faxes":              false,
		"/v1/faxes.json":          false,
		"/v1/fa%20xes":            false,
		"/v1/{}":                  false,
		"/v1/{a-b}":               false,
		"/v1/{a}b":                false,
		"/v1/../auth":             false,
	} {
		if got := validRoutePath(p); got != want {
			t.Errorf("validRoutePath(%q) = %v, want %v", p, got, want)
		}
	}
}
