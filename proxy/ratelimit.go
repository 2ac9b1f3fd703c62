package proxy

import (
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/faxgate/faxgate/policy/limit"
)

// setRateLimitHeaders reports the caller's quota on every response, allowed
// or limited (RateLimit-* of the IETF draft, Retry-After when limited).
// Durations are whole seconds, rounded up, so a client that waits that long
// is admitted.
func setRateLimitHeaders(h http.Header, r limit.RateResult) {
	vals := new(rateLimitValues)
	v := vals.v[:]
	v[0], v[1], v[2] = vals.itoa(int64(r.Limit)), vals.itoa(int64(r.Remaining)), vals.itoa(ceilSeconds(r.Reset))
	h["Ratelimit-Limit"] = v[0:1:1]
	h["Ratelimit-Remaining"] = v[1:2:2]
	h["Ratelimit-Reset"] = v[2:3:3]
	if !r.Allowed {
		v[3] = vals.itoa(max(1, ceilSeconds(r.RetryAfter)))
		h["Retry-After"] = v[3:4:4]
	}
}

// rateLimitValues backs one response's rate-limit header values: one
// allocation holds the value slices and their digits.
type rateLimitValues struct {
	v      [4]string
	digits [4 * 20]byte // 20 digits hold any int64 of ours (never negative)
	used   int
}

// itoa formats n into digits. The string shares digits' memory, which is
// never written again.
func (rv *rateLimitValues) itoa(n int64) string {
	b := strconv.AppendInt(rv.digits[rv.used:rv.used], n, 10)
	rv.used += len(b)
	return unsafe.String(&b[0], len(b))
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
