package proxy

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/faxgate/faxgate/policy/limit"
)

// Values from the small-number table and values written into the shared
// digits read the same as strconv would write them, each in its own header.
func TestRateLimitHeaderValues(t *testing.T) {
	for _, tc := range []struct {
		r    limit.RateResult
		want map[string]string
	}{
		{limit.RateResult{Allowed: true, Limit: 100, Remaining: 99, Reset: 1500 * time.Millisecond},
			map[string]string{"Ratelimit-Limit": "100", "Ratelimit-Remaining": "99", "Ratelimit-Reset": "2"}},
		{limit.RateResult{Allowed: true, Limit: 1000000, Remaining: 999999, Reset: 1024 * time.Second},
			map[string]string{"Ratelimit-Limit": "1000000", "Ratelimit-Remaining": "999999", "Ratelimit-Reset": "1024"}},
		{limit.RateResult{Allowed: false, Limit: math.MaxInt32, Remaining: 0, Reset: time.Hour, RetryAfter: 3 * time.Hour},
			map[string]string{"Ratelimit-Limit": "2147483647", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "3600", "Retry-After": "10800"}},
		{limit.RateResult{Allowed: false, Limit: 5, Remaining: 0, Reset: time.Millisecond, RetryAfter: 0},
			map[string]string{"Ratelimit-Limit": "5", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "1", "Retry-After": "1"}},
	} {
		h := http.Header{}
		setRateLimitHeaders(h, tc.r)
		if len(h) != len(tc.want) {
			t.Errorf("%+v: headers %v, want %v", tc.r, h, tc.want)
		}
		for k, v := range tc.want {
			if got := h[k]; len(got) != 1 || got[0] != v {
				t.Errorf("%+v: %s = %q, want %q", tc.r, k, got, v)
			}
		}
	}
}
