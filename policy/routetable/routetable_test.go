package routetable

import (
	"net/textproto"
	"strings"
	"testing"
)

func TestBuiltin(t *testing.T) {
	rs := Builtin()
	if len(rs) != 13 || rs[0] != (Route{Name: Auth, Method: "POST", Path: "/v1/auth"}) {
		t.Fatalf("Builtin() = %v; want 13 routes, auth first", rs)
	}
	names := map[string]bool{}
	for _, r := range rs {
		if names[r.Name] {
			t.Errorf("route name %q appears twice", r.Name)
		}
		names[r.Name] = true
		if r.Name == Unmatched || r.Name == Unknown {
			t.Errorf("route %v has a reserved name", r)
		}
		if !IsMethod(r.Method) {
			t.Errorf("route %v: method is not one of Methods", r)
		}
		rest, ok := strings.CutPrefix(r.Path, "/v1/")
		if !ok {
			t.Errorf("route %v: path is not under /v1/", r)
		}
		for _, seg := range strings.Split(rest, "/") {
			if name, ok := ParamName(seg); ok {
				seg = name
			}
			for i := 0; i < len(seg); i++ {
				if !IsSegmentByte(seg[i]) {
					t.Errorf("route %v: segment %q has byte %q", r, seg, seg[i])
				}
			}
		}
	}
	rs[0].Name = "changed"
	if Builtin()[0].Name != Auth {
		t.Errorf("Builtin shares its slice with callers")
	}
}

func TestMethods(t *testing.T) {
	if got, want := strings.Join(Methods(), " "), "GET POST PATCH PUT DELETE"; got != want {
		t.Errorf("Methods() = %s, want %s (the methods docs/callers-and-policy.md lists)", got, want)
	}
	for _, m := range Methods() {
		if !IsMethod(m) {
			t.Errorf("IsMethod(%q) = false", m)
		}
	}
	for _, m := range []string{"get", "HEAD", "OPTIONS", "CONNECT", "TRACE", "", "GET ", "DELETE\x00"} {
		if IsMethod(m) {
			t.Errorf("IsMethod(%q) = true", m)
		}
	}
	Methods()[0] = "HEAD"
	if !IsMethod("GET") || IsMethod("HEAD") {
		t.Error("Methods() shares its backing array")
	}
	if a := testing.AllocsPerRun(100, func() { _ = IsMethod("DELETE") }); a != 0 {
		t.Errorf("IsMethod allocates %v times, want 0", a)
	}
}

func TestParamName(t *testing.T) {
	for _, tc := range []struct {
		seg, name string
		ok        bool
	}{
		{"{templateId}", "templateId", true},
		{"{}", "", true}, // a parameter, and one validation refuses
		{"templates", "", false},
		{"{a", "", false},
		{"a}", "", false},
		{"{", "", false},
		{"", "", false},
	} {
		if name, ok := ParamName(tc.seg); name != tc.name || ok != tc.ok {
			t.Errorf("ParamName(%q) = %q, %v; want %q, %v", tc.seg, name, ok, tc.name, tc.ok)
		}
	}
}

func TestIsSegmentByte(t *testing.T) {
	var got []byte
	for c := 0; c < 256; c++ {
		if IsSegmentByte(byte(c)) {
			got = append(got, byte(c))
		}
	}
	if want := "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"; string(got) != want {
		t.Errorf("segment bytes = %q, want %q", got, want)
	}
}

func TestOverlapOf(t *testing.T) {
	for _, tc := range []struct {
		sensitive, other string
		want             Overlap
	}{
		{"/v1/numbers/delete", "/v1/numbers/delete", SamePath},
		{"/v1/numbers/delete", "/v1/Numbers/DELETE", SamePath},
		{"/v1/faxes/{faxId}", "/v1/faxes/{id}", SamePath},
		{"/v1/numbers/delete", "/v1/numbers/list", Apart},
		{"/v1/numbers/delete", "/v1/numbers", Apart},
		{"/v1/numbers/delete", "/v1/numbers/deletex", Apart},
		// As many segments: the router prefers the fixed one at the first
		// difference.
		{"/v1/faxes/{faxId}", "/v1/faxes/inbox", TakesPaths},
		{"/v1/faxes/{faxId}", "/v1/FAXES/inbox", TakesPaths},
		{"/v1/{a}/{b}", "/v1/faxes/{faxId}", TakesPaths},
		{"/v1/{a}/x", "/v1/faxes/{b}", TakesPaths}, // the first difference decides
		{"/v1/numbers/delete", "/v1/{a}/{b}", Apart},
		{"/v1/numbers/delete", "/v1/numbers/{id}", Apart},
		{"/v1/faxes/{a}", "/v1/{b}/x", Apart},
		{"/v1/{a}/x", "/v1/faxes/y", Apart}, // fixed segments disagree
		// More segments.
		{"/v1/numbers/delete", "/v1/numbers/delete/preview", Below},
		{"/v1/numbers/delete", "/v1/NUMBERS/delete/preview", Below},
		{"/v1/faxes/{faxId}/purge", "/v1/faxes/{id}/purge/log", Below},
		{"/v1/numbers/delete", "/v1/numbers/{numberId}/status", ReachesBelow},
		{"/v1/numbers/delete", "/v1/{a}/{b}/{c}", ReachesBelow},
		{"/v1/faxes/{faxId}/purge", "/v1/faxes/archive/purge/all", ReachesBelow},
		{"/v1/numbers/delete", "/v1/numbers/list/x", Apart},
		{"/v1/faxes/{faxId}/purge", "/v1/faxes/archive/keep/all", Apart},
	} {
		if got := OverlapOf(tc.sensitive, tc.other); got != tc.want {
			t.Errorf("OverlapOf(%q, %q) = %v, want %v", tc.sensitive, tc.other, got, tc.want)
		}
	}
}

func TestStrippedRequestHeaders(t *testing.T) {
	hs := StrippedRequestHeaders()
	seen := map[string]bool{}
	for _, h := range hs {
		if c := textproto.CanonicalMIMEHeaderKey(h); c != h {
			t.Errorf("%q is not canonical (%q): the proxy compares canonical names", h, c)
		}
		if seen[h] {
			t.Errorf("%q is listed twice", h)
		}
		seen[h] = true
	}
	// The credentials docs/security.md names, the confirm header.
	for _, h := range []string{"Authorization", "Api-Key", "X-Auth-Token", "X-Access-Token", ConfirmHeader} {
		if !seen[h] {
			t.Errorf("%s is not stripped", h)
		}
	}
	hs[0] = "X-Changed"
	if StrippedRequestHeaders()[0] != "Authorization" {
		t.Error("StrippedRequestHeaders shares its backing array")
	}
}
