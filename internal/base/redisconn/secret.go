package redisconn

import "fmt"

const redacted = "[redacted]"

// Secret is a Redis password. Every way fmt, encoding/json and zap have of
// rendering it says "[redacted]"; only the client built here reads it.
type Secret struct {
	v string // unexported so reflection-based encoders see nothing
}

// NewSecret wraps s.
func NewSecret(s string) Secret { return Secret{v: s} }

// String implements fmt.Stringer (and so zap's Stringer fields).
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer, for %#v.
func (Secret) GoString() string { return redacted }

// Format makes every fmt verb print "[redacted]".
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalText implements encoding.TextMarshaler.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Passwords are the values of the variables redis.password_env and
// redis.sentinel_password_env name (the caller reads them through its
// injected getenv): the data nodes' password and the sentinels' own.
type Passwords struct {
	Data     Secret
	Sentinel Secret
}
