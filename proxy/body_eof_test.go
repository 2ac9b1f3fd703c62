package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSlowUpstreamAfterStreamedBody: a streamed upload of known length
// (here 100 KiB, kept for a resend) whose upstream answers more than
// read_timeout after the body ended gets the upstream's answer. The body's
// read deadline must stay cleared after the body's end: the server's
// background read, which watches for a vanished caller, would otherwise
// time out and cancel the request.
func TestSlowUpstreamAfterStreamedBody(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/slow" {
				next.ServeHTTP(w, r)
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			time.Sleep(4 * readTimeout) // models an upstream slow to answer, well within upstream.timeout
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"ok":true}`)
		})
	}
	tr, err := NewTransport(TransportOptions{MaxIdleConns: 4}) // the gateway's: the body sends itself (replay_send.go)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, h := startGatewayUpstream(t, tr, wrap)
	h.opts.ReadTimeout = readTimeout // before any request
	body := strings.Repeat("x", 100<<10)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	head := "POST /v1/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // models a caller whose body comes after its head: the body streams
	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || string(b) != `{"ok":true}` {
		t.Fatalf("status %d, body %q: want the upstream's 200 and its body", res.StatusCode, b)
	}
}
