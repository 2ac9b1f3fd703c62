package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/faxgate/faxgate/policy"
)

// setRateLimitHeaders reports the caller's quota on every response, allowed
// or limited (RateLimit-* of the IETF draft, Retry-After when limited).
// Durations are whole seconds, rounded up, so a client that waits that long
// is admitted.
func setRateLimitHeaders(h http.Header, r policy.RateResult) {
	h["Ratelimit-Limit"] = []string{strconv.Itoa(r.Limit)}
	h["Ratelimit-Remaining"] = []string{strconv.Itoa(r.Remaining)}
	h["Ratelimit-Reset"] = []string{strconv.FormatInt(ceilSeconds(r.Reset), 10)}
	if !r.Allowed {
		h["Retry-After"] = []string{strconv.FormatInt(max(1, ceilSeconds(r.RetryAfter)), 10)}
	}
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
