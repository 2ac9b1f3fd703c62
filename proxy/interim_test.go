package proxy_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// earlyHintsUpstream answers /v1/hints/ with a 103 Early Hints, then the
// final answer; everything else goes to faxsim.
func earlyHintsUpstream(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/hints/") {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Link", "</app.js>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":1,"message":"ok"}`))
	})
}

// Interim answers: relayed to HTTP/1.1 callers only (RFC 9110 section 15.2
// forbids a 1xx to an HTTP/1.0 client), and the final answer keeps the
// gateway's RateLimit-* and X-Request-Id after one. Regression: a 103 went
// to HTTP/1.0 callers too, and clearing the header map after it dropped
// RateLimit-* from the final answer.
func TestInterimAnswersOnlyToHTTP11AndTheFinalKeepsItsHeaders(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers, Wrap: earlyHintsUpstream})
	for _, c := range []struct {
		proto     string
		want1xx   bool
		finalLine string
	}{
		{"HTTP/1.1", true, "HTTP/1.1 200 "},
		{"HTTP/1.0", false, "HTTP/1.0 200 "},
	} {
		t.Run(c.proto, func(t *testing.T) {
			out := g.Raw(t, "GET /v1/hints/x "+c.proto+"\r\nHost: faxgate.test\r\nX-Request-Id: hints-"+c.proto[5:]+"\r\nConnection: close\r\n\r\n", 3*time.Second)
			interim, final, ok := strings.Cut(out, c.finalLine)
			if !ok {
				t.Fatalf("no final answer %q in %q", c.finalLine, out)
			}
			if got := strings.Contains(interim, " 103 "); got != c.want1xx {
				t.Errorf("103 relayed = %v, want %v:\n%s", got, c.want1xx, out)
			}
			if c.want1xx && !strings.Contains(interim, "Link: </app.js>; rel=preload") {
				t.Errorf("the 103 lost its Link header:\n%s", interim)
			}
			head, _, _ := strings.Cut(final, "\r\n\r\n")
			for _, h := range []string{"X-Request-Id: hints-", "Ratelimit-Limit: 1000", "Ratelimit-Remaining: ", "Ratelimit-Reset: "} {
				if !strings.Contains(head, h) {
					t.Errorf("the final answer lacks %q:\n%s", h, head)
				}
			}
			if strings.Contains(head, "Link:") {
				t.Errorf("the 103's Link header stayed on the final answer:\n%s", head)
			}
		})
	}
}
