package proxy

import (
	"net/http"
	"time"

	"github.com/faxgate/faxgate/internal/ascii"
	"github.com/faxgate/faxgate/policy"
)

// setRateLimitHeaders reports the caller's quota on every response, allowed
// or limited (RateLimit-* of the IETF draft, Retry-After when limited).
// Durations are whole seconds, rounded up, so a client that waits that long
// is admitted.
func setRateLimitHeaders(h http.Header, r policy.RateResult) {
	// One backing array for the values keeps this to one allocation in the
	// common case (small numbers come from ascii.Itoa's table).
	v := make([]string, 4)
	v[0], v[1], v[2] = ascii.Itoa(int64(r.Limit)), ascii.Itoa(int64(r.Remaining)), ascii.Itoa(ceilSeconds(r.Reset))
	h["Ratelimit-Limit"] = v[0:1:1]
	h["Ratelimit-Remaining"] = v[1:2:2]
	h["Ratelimit-Reset"] = v[2:3:3]
	if !r.Allowed {
		v[3] = ascii.Itoa(max(1, ceilSeconds(r.RetryAfter)))
		h["Retry-After"] = v[3:4:4]
	}
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
