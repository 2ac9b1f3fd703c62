// Package tokencache obtains, renews and hands out the upstream Bearer token
// (docs/tokens.md). The API secret and tokens only ever travel inside
// Secret, a type that cannot print itself.
package tokencache

import (
	"crypto/subtle"
	"fmt"
)

const redacted = "[redacted]"

// Secret holds a credential (the API secret or a Bearer token). Every way Go,
// fmt, encoding/json and zap have of rendering a value renders it as
// "[redacted]"; only Reveal gives the value, and only the code that sends it
// upstream calls Reveal.
type Secret struct {
	v string // unexported so reflection-based encoders see nothing
}

// NewSecret wraps s.
func NewSecret(s string) Secret { return Secret{v: s} }

// Reveal returns the credential itself. Call it only to put it on the wire.
func (s Secret) Reveal() string { return s.v }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.v == "" }

// Equal compares two secrets in constant time.
func (s Secret) Equal(o Secret) bool {
	return subtle.ConstantTimeCompare([]byte(s.v), []byte(o.v)) == 1
}

// String implements fmt.Stringer (and so zap's Stringer fields).
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer, for %#v.
func (Secret) GoString() string { return redacted }

// Format makes every fmt verb, including %x and %q, print "[redacted]".
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalText implements encoding.TextMarshaler.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// MarshalJSON implements json.Marshaler.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
