package config

import (
	"fmt"
	"strings"
)

// expand replaces every ${NAME} in s with getenv(NAME). "$$" is a literal
// "$", and a "$" followed by anything but "{" or "$" is kept as it is.
// Substituted values are never expanded again, so a secret that happens to
// contain "${" stays intact.
//
// expanded reports whether any variable was substituted: the caller then
// knows that the result may hold an environment value and must not print it.
// errs describes every malformed reference and unset variable; the messages
// name variables but never hold a value. A nil getenv treats every variable
// as unset.
func expand(s string, getenv func(string) (string, bool)) (out string, expanded bool, errs []string) {
	if !strings.Contains(s, "$") {
		return s, false, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c != '$':
			b.WriteByte(c)
			i++
		case i+1 < len(s) && s[i+1] == '$':
			b.WriteByte('$')
			i += 2
		case i+1 >= len(s) || s[i+1] != '{':
			b.WriteByte('$')
			i++
		default:
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				errs = append(errs, `unclosed "${" (write "$$" for a literal "$")`)
				b.WriteString(s[i:])
				i = len(s)
				continue
			}
			name := s[i+2 : i+2+end]
			i += 2 + end + 1
			if !validEnvName(name) {
				errs = append(errs, fmt.Sprintf("invalid environment variable name %q", name))
				continue
			}
			var val string
			ok := false
			if getenv != nil {
				val, ok = getenv(name)
			}
			if !ok {
				errs = append(errs, fmt.Sprintf("environment variable %q is not set", name))
				continue
			}
			b.WriteString(val)
			expanded = true
		}
	}
	return b.String(), expanded, errs
}

// validEnvName reports whether name matches [A-Za-z_][A-Za-z0-9_]*, the
// portable shell variable names.
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
