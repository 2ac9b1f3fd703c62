// Package ascii has the byte-level comparisons that parsing untrusted HTTP
// input needs, where Unicode-aware functions would be wrong.
package ascii

import "strings"

// EqualFold reports whether a and b are equal under ASCII case folding only.
// strings.EqualFold and bytes.EqualFold also fold Unicode ("ſ" matches "s",
// "K" (Kelvin) matches "k"), which would let a request smuggle a name the
// gateway treats as one thing and the upstream as another.
func EqualFold[A, B ~string | ~[]byte](a A, b B) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// IsToken reports whether s is an RFC 9110 token: a valid HTTP field name
// or method.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
