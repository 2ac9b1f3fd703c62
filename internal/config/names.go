package config

import (
	"time"

	"github.com/faxgate/faxgate/policy/routetable"
)

// ConfirmHeader is routetable.ConfirmHeader: the request header in which a
// caller echoes the body's number_id for a route in policy.confirm. The
// gateway consumes it, so it is never forwarded and cannot be
// callers.identity_header.
const ConfirmHeader = routetable.ConfirmHeader

// TokenLifetime is the lifetime of the upstream's tokens, as confirmed
// against the Customer API (upstream-api-v1.md, Limits): token.refresh_before
// must be shorter, and a token response without a usable expires_in is taken
// to last this long.
const TokenLifetime = 24 * time.Hour
