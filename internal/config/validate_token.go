package config

import "strings"

// validateToken checks token.
func (v *validator) validateToken(t Token) {
	v.oneOf("token.store", t.Store, "memory", "redis")
	v.positive("token.refresh_before", t.RefreshBefore)
	// Renewing this long or longer before expiry would renew on every tick.
	if t.RefreshBefore >= TokenLifetime {
		v.add("token.refresh_before", "must be less than the %s token lifetime (a token is renewed this long before it expires), got %s",
			strings.TrimSuffix(TokenLifetime.String(), "0m0s"), v.q("token.refresh_before", t.RefreshBefore.String()))
	}
	v.positive("token.retry_min", t.RetryMin)
	v.positive("token.retry_max", t.RetryMax)
	if t.RetryMin > t.RetryMax {
		v.add("token.retry_min", "%s is greater than token.retry_max %s",
			v.q("token.retry_min", t.RetryMin.String()), v.q("token.retry_max", t.RetryMax.String()))
	}
}
