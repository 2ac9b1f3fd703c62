package config

import "time"

// This file holds the facts that configuration, policy, proxy, metrics and
// tokencache all depend on: the methods the gateway forwards, the confirm
// header, the upstream's token lifetime. They live here, the lowest package
// every one of them imports, so that each exists once.

// methods are the HTTP methods the gateway forwards
// (docs/callers-and-policy.md); a route needs one of them, and any other
// method gets 405.
var methods = [...]string{"GET", "POST", "PATCH", "PUT", "DELETE"}

// Methods returns the HTTP methods the gateway forwards, in the order
// docs/callers-and-policy.md lists them. Each call returns a new slice.
func Methods() []string { return append([]string(nil), methods[:]...) }

// IsMethod reports whether m is one of Methods, spelled exactly (methods are
// case-sensitive). It does not allocate: the proxy calls it on every request.
func IsMethod(m string) bool {
	for _, x := range methods {
		if m == x {
			return true
		}
	}
	return false
}

// ConfirmHeader is the request header in which a caller echoes the body's
// number_id for a route in policy.confirm. The gateway consumes it, so it
// is never forwarded and cannot be callers.identity_header.
const ConfirmHeader = "X-Faxgate-Confirm"

// TokenLifetime is the lifetime of the upstream's tokens, as confirmed
// against the Customer API (upstream-api-v1.md, Limits): token.refresh_before
// must be shorter, and a token response without a usable expires_in is taken
// to last this long.
const TokenLifetime = 24 * time.Hour
