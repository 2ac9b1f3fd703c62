package config

import (
	"time"
)

// This file holds the constants that other packages read through config
// (tokencache). The route facts themselves live in
// policy/routetable.

// TokenLifetime is the lifetime of the tokens of the vendor's Customer API
// v1 (docs/metrics-and-alerts.md, Why these token thresholds):
// token.refresh_before must be shorter (docs/configuration.md), and a token
// response without a usable expires_in is taken to last this long.
const TokenLifetime = 24 * time.Hour
