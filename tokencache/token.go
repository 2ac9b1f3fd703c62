package tokencache

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Token is one Bearer token with the times that govern its use.
type Token struct {
	// Value is the access token.
	Value Secret
	// Issued is when the request that obtained it was sent; Expiry is counted
	// from then, so clock skew and latency make the gateway early, never late.
	Issued time.Time
	// Expiry is when the upstream stops accepting it.
	Expiry time.Time
	// By401 marks a token obtained because the previous one was rejected with
	// 401; such a token is not itself renewed because of a 401 while young.
	By401 bool

	// header is "Bearer <value>", built once so the hot path does not
	// concatenate; headerVals holds it as a header value list.
	header     string
	headerVals []string
}

// NewToken builds a token valid from issued for lifetime.
func NewToken(v Secret, issued time.Time, lifetime time.Duration, by401 bool) *Token {
	h := "Bearer " + v.Reveal()
	return &Token{Value: v, Issued: issued, Expiry: issued.Add(lifetime), By401: by401, header: h, headerVals: []string{h}}
}

// Header returns the Authorization header value. It is a credential: callers
// put it on the upstream request and nowhere else.
func (t *Token) Header() string { return t.header }

// HeaderValues is Header as an http.Header value list, shared by every
// request: callers must not modify it (net/http only reads it).
func (t *Token) HeaderValues() []string { return t.headerVals[:1:1] }

// String renders the token without its value. With GoString and Format it
// covers every fmt verb: fmt prints unexported fields, and header holds
// "Bearer <value>" in clear.
func (t Token) String() string {
	return fmt.Sprintf("{Value:%s Issued:%s Expiry:%s By401:%t}", redacted,
		t.Issued.Format(time.RFC3339), t.Expiry.Format(time.RFC3339), t.By401)
}

// GoString implements fmt.GoStringer, for %#v.
func (t Token) GoString() string { return t.String() }

// Format makes every fmt verb print String.
func (t Token) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, t.String()) }

// Lifetime is the token's whole validity period.
func (t *Token) Lifetime() time.Duration { return t.Expiry.Sub(t.Issued) }

// Valid reports whether the token may still be sent at now. The margin keeps
// the gateway from sending a token that would expire while the request is in
// flight.
func (t *Token) Valid(now time.Time) bool {
	return t != nil && now.Add(min(expiryMargin, t.Lifetime()/20)).Before(t.Expiry)
}

// expiryMargin is how long before Expiry a token stops being sent (less for
// tokens shorter than 100s, as test and simulator tokens are).
const expiryMargin = 5 * time.Second

// ErrInvalidKey means the upstream rejected the API secret (HTTP 401 from /v1/auth).
var ErrInvalidKey = errors.New("upstream rejected the API secret key")

// ErrUnavailable means no valid token can be had right now.
var ErrUnavailable = errors.New("no valid upstream token")
