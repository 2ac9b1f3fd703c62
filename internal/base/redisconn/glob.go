package redisconn

import "strings"

// EscapeGlob quotes the characters that Redis glob patterns (SCAN MATCH,
// PSUBSCRIBE) treat specially, so that a key prefix holding them matches
// only itself.
func EscapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
