package config

import (
	"time"

	"github.com/faxgate/faxgate/policy/routetable"
)

// This file holds the constants that other packages read through config
// (policy, tokencache). The route facts themselves live in
// policy/routetable.

// ConfirmHeader is routetable.ConfirmHeader: the request header in which a
// caller echoes the body's number_id for a route in policy.confirm. The
// gateway consumes it, so it is never forwarded and cannot be
// callers.identity_header.
const ConfirmHeader = routetable.ConfirmHeader

// TokenLifetime is the lifetime of the tokens of the vendor's Customer API
// v1 (docs/metrics-and-alerts.md, Why these token thresholds):
// token.refresh_before must be shorter (docs/configuration.md), and a token
// response without a usable expires_in is taken to last this long.
const TokenLifetime = 24 * time.Hour
