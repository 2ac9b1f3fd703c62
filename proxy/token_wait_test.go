package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// A caller that leaves while the gateway waits for a token is a 499, as any
// caller leaving is, and no token_unavailable denial: the token alerts must
// not fire on callers' impatience. Regression: it was counted as 503
// token_unavailable.
func TestCallerLeavingDuringTheTokenWaitIs499(t *testing.T) {
	release := make(chan struct{})
	slowAuth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/auth" {
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers, Wrap: slowAuth, NoWait: true, UpstreamTimeout: 10 * time.Second})
	defer close(release)

	c, err := g.Dial(nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(post("/v1/contacts/list", `{}`, "X-Request-Id: leaves-early"))); err != nil {
		t.Fatal(err)
	}
	// The request is in the handler, where nothing but the token can hold
	// it (the upstream's auth call is stalled by slowAuth): then it leaves.
	eventually.Eventually(t, 5*time.Second, "the request in flight", func() bool {
		return testutil.ToFloat64(g.Metrics.Proxy.Inflight) == 1
	})
	c.Close()

	off := 0
	line := accessLine(t, g, "leaves-early", &off, true)
	if line == nil {
		t.Fatal("no access line for the request")
	}
	if line["status"] != float64(499) || line["error"] != "client_closed" {
		t.Errorf("access line status %v error %v, want 499 client_closed", line["status"], line["error"])
	}
	if n := testutil.ToFloat64(g.Metrics.Proxy.Denied.WithLabelValues("svc", "contacts.list", "token_unavailable")); n != 0 {
		t.Errorf("faxgate_denied_total{reason=token_unavailable} = %v, want 0", n)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.Requests.WithLabelValues("svc", "contacts.list", "POST", "499")); got != 1 {
		t.Errorf(`faxgate_requests_total{code="499"} = %v, want 1`, got)
	}
}
