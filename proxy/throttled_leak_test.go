package proxy_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// TestThrottledWaiterThatLeavesGivesItsCopyBack: a streamed upload kept
// for a resend, answered 429 by the vendor and waiting it out
// (retry_throttled), whose caller leaves during the wait, gives the copy's
// memory back: the reader over the copy taken for the resend is closed.
func TestThrottledWaiterThatLeavesGivesItsCopyBack(t *testing.T) {
	answered := make(chan struct{}, 1)
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/contacts/list" {
				next.ServeHTTP(w, r)
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Retry-After", "4")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"status":0,"message":"Too Many Attempts."}`)
			select {
			case answered <- struct{}{}:
			default:
			}
		})
	}
	g := gatewaytest.Start(t, gatewaytest.Options{Wrap: wrap,
		Config: retryCallers + "upstream_budget:\n  max_wait: 5s\n  retry_throttled: true\n"})
	body := `{"q":"` + strings.Repeat("a", 100<<10) + `"}` // streamed, with a copy
	c, err := g.Dial(nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	head := "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // models a caller whose body comes after its head: the body streams
	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream never answered 429")
	}
	eventually.Eventually(t, 5*time.Second, "the request to wait out the 429", func() bool {
		return testutil.ToFloat64(g.Metrics.Limits.BudgetWaiting) == 1
	})
	c.Close() // the caller leaves while the request waits out the 429
	line := g.LastAccessLine(t, "contacts.list")
	t.Logf("access line: %v", line)
	eventually.Eventually(t, 5*time.Second, "the copy's memory to be given back", func() bool {
		return g.Handler.BodyMemoryHeld() == 0
	})
}
