package config

import "math"

// validateRateLimit checks rate_limit.
func (v *validator) validateRateLimit(r RateLimit) {
	v.oneOf("rate_limit.backend", r.Backend, "local", "redis")
	v.limit("rate_limit.default", r.Default)
	if r.ReplicasHint < 1 {
		v.add("rate_limit.replicas_hint", "must be at least 1, got %s", v.qint("rate_limit.replicas_hint", int64(r.ReplicasHint)))
	}
}

// limit checks a token-bucket rate at path.
func (v *validator) limit(path string, l Limit) {
	if !(l.RPS > 0) || math.IsInf(l.RPS, 0) {
		v.add(path+".rps", "must be greater than 0, got %s", v.qfloat(path+".rps", l.RPS))
	}
	if l.Burst < 1 {
		v.add(path+".burst", "must be at least 1, got %s", v.qint(path+".burst", int64(l.Burst)))
	}
}
