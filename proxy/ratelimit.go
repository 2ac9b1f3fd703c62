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
	// One backing array for the values keeps this to one allocation in the
	// common case (small numbers come from a table).
	v := make([]string, 4)
	v[0], v[1], v[2] = itoa(int64(r.Limit)), itoa(int64(r.Remaining)), itoa(ceilSeconds(r.Reset))
	h["Ratelimit-Limit"] = v[0:1:1]
	h["Ratelimit-Remaining"] = v[1:2:2]
	h["Ratelimit-Reset"] = v[2:3:3]
	if !r.Allowed {
		v[3] = itoa(max(1, ceilSeconds(r.RetryAfter)))
		h["Retry-After"] = v[3:4:4]
	}
}

var smallInts = func() (t [1024]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

func itoa(n int64) string {
	if n >= 0 && n < int64(len(smallInts)) {
		return smallInts[n]
	}
	return strconv.FormatInt(n, 10)
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
