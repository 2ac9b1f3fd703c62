package config

import (
	"strings"
	"testing"

	"github.com/faxgate/faxgate/policy/routetable"
)

// TestIdentityHeaderIsNoStrippedHeader: callers.identity_header may be no
// header the gateway strips before forwarding, in any letter case. check
// used to accept X-Auth-Token and the other names a second, shorter list
// lacked.
func TestIdentityHeaderIsNoStrippedHeader(t *testing.T) {
	for _, h := range append(routetable.StrippedRequestHeaders(), "X-Forwarded-User") {
		for _, spelling := range []string{h, strings.ToLower(h), strings.ReplaceAll(h, "-", "_")} {
			c := validConfig()
			c.Callers.IdentityHeader = spelling
			want := `callers.identity_header: "` + spelling + `" cannot be used: the gateway strips or sets it itself`
			if got := Validate(c); len(got) != 1 || got[0].String() != want {
				t.Errorf("identity_header %s: got %v, want %s", spelling, got, want)
			}
		}
	}
}

func TestValidSpiffeID(t *testing.T) {
	for s, want := range map[string]bool{
		"spiffe://example.org":            true,
		"spiffe://example.org/ns/a/sa/b":  true,
		"spiffe://ex_ample-1.org/a.b_c-d": true,
		"spiffe://":                       false,
		"spiffe://Example.org/a":          false,
		"spiffe://example.org/":           false,
		"spiffe://example.org//a":         false,
		"spiffe://example.org/a/../b":     false,
		"spiffe://example.org:8080/a":     false,
		"spiffe://example.org/a?x":        false,
		"SPIFFE://example.org/a":          false,
		"https://example.org/a":           false,
		"spiffe://user@example.org/a":     false,
	} {
		if got := validSpiffeID(s); got != want {
			t.Errorf("validSpiffeID(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestParseCIDR(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"::ffff:10.1.2.3/104", "10.0.0.0/8"},
		{"::ffff:10.1.2.3/96", "0.0.0.0/0"},
		{"::ffff:10.1.2.3/128", "10.1.2.3/32"},
		{"fd00::1/8", "fd00::/8"},
		{"::ffff:10.0.0.0/95", ""},
		{"::ffff:10.0.0.0/8", ""},
		{"10.0.0.1", ""},
		{"10.0.0/8", ""},
		{"fe80::1%eth0/64", ""},
	} {
		p, err := ParseCIDR(tc.in)
		got := ""
		if err == nil {
			got = p.String()
		}
		if got != tc.want {
			t.Errorf("ParseCIDR(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
