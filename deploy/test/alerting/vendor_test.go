//go:build alerting

package alerting

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// vendor stands between faxgate and faxsim for what the simulator cannot do
// per route: faxes.send answered after a delay of up to maxUploadDelay, as the
// vendor does with large documents, and one 429 with Retry-After: 1 when
// the test asks for it. Everything else is faxsim's own answer, proxied.
type vendor struct {
	srv       *httptest.Server
	throttle  atomic.Bool  // the next /v1/contacts/list gets 429
	throttled atomic.Int64 // 429s sent
	uploads   atomic.Int64 // faxes.send requests delayed
}

// maxUploadDelay is how long the vendor takes for an upload at most
// (docs/development.md, "The alerting e2e": the soak's 1 MiB uploads take
// up to 8 s upstream).
const maxUploadDelay = 8 * time.Second

func newVendor(t *testing.T, simURL string) *vendor {
	t.Helper()
	target, err := url.Parse(simURL)
	if err != nil {
		t.Fatal(err)
	}
	v := &vendor{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	v.srv = newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/contacts/list" && v.throttle.CompareAndSwap(true, false):
			v.throttled.Add(1)
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"status":0,"message":"Too Many Attempts."}`))
			return
		case r.URL.Path == "/v1/faxes/send":
			v.uploads.Add(1)
			// Between half and all of maxUploadDelay.
			d := maxUploadDelay/2 + rand.N(maxUploadDelay/2)
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	return v
}
