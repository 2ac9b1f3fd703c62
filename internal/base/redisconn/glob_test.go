package redisconn

import "testing"

func TestEscapeGlob(t *testing.T) {
	for in, want := range map[string]string{
		"faxgate:":       "faxgate:",
		"a*b?c[d]e\\f":   `a\*b\?c\[d\]e\\f`,
		"ünïcode-{tag}:": "ünïcode-{tag}:",
	} {
		if got := EscapeGlob(in); got != want {
			t.Errorf("EscapeGlob(%q) = %q, want %q", in, got, want)
		}
	}
}
