package proxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

func wantEnvelope(t *testing.T, resp *http.Response, body string, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d: %s", resp.StatusCode, status, body)
	}
	st, msg, got := gatewaytest.Envelope(t, body)
	if st != 0 || got != code || msg == "" {
		t.Fatalf("envelope = {status:%d message:%q error:%q}, want status 0, error %q", st, msg, got, code)
	}
	if resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("headers = %v", resp.Header)
	}
}

func TestUpstreamTimeoutIs504(t *testing.T) {
	const timeout = 300 * time.Millisecond
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers, UpstreamTimeout: timeout})
	g.Sim.SetLatency(time.Minute) // the upstream would answer far too late
	start := time.Now()
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`)
	wantEnvelope(t, resp, body, 504, "upstream_timeout")
	// At the timeout, not at the upstream's answer: 3 s for a loaded machine.
	if d := time.Since(start); d < timeout || d > timeout+3*time.Second {
		t.Fatalf("took %v, want about the %v upstream timeout", d, timeout)
	}
}

func TestUpstreamDownIs502(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	g.Upstream.Close()
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`)
	wantEnvelope(t, resp, body, 502, "upstream_unavailable")
}

func TestInvalidKeyIs503AndNotReady(t *testing.T) {
	// A request that waited for a token would wait its upstream.timeout,
	// a minute here.
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + "token:\n  retry_min: 1h\n  retry_max: 2h\n",
		SimKey: "another-key", NoWait: true, UpstreamTimeout: time.Minute})
	eventually.Eventually(t, 5*time.Second, "an invalid_key renewal counted", func() bool {
		return testutil.ToFloat64(g.Metrics.Tokens.Refresh.WithLabelValues("invalid_key")) >= 1
	})
	if ok, why := g.Tokens.Ready(); ok || why != "upstream rejected the API secret key" {
		t.Fatalf("Ready = %v %q", ok, why)
	}
	start := time.Now()
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`)
	wantEnvelope(t, resp, body, 503, "token_unavailable")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a request without a token took %v: it waited instead of failing fast", d)
	}
	if strings.Contains(g.Logs(), gatewaytest.Key) {
		t.Fatal("the key reached the logs")
	}
}

func TestUpstream401RenewsAndResendsOnce(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	g.Sim.RevokeTokens()
	resp, body := g.Do(t, "POST", "/v1/contacts/create", `{"type":"individual","is_organization":false,"first_name":"A","last_name":"B"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("after revocation: %d %s, want 200 after one renewal and resend", resp.StatusCode, body)
	}
	if n := g.Sim.AuthCalls(); n != 2 {
		t.Fatalf("auth calls = %d, want 2", n)
	}
	if n := g.Sim.RouteCounts()["POST /v1/contacts/create"]; n != 2 {
		t.Fatalf("create reached the upstream %d times, want 2 (first 401, then the resend)", n)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.Upstream401Retries.WithLabelValues("contacts.create")); got != 1 {
		t.Fatalf("faxgate_upstream_401_retries_total = %v, want 1", got)
	}
	reqs := g.Sim.Requests()
	if a, b := string(reqs[len(reqs)-3].Body), string(reqs[len(reqs)-1].Body); a != b || a == "" {
		t.Fatalf("resent body %q differs from the first %q", b, a)
	}
}

func TestUpstream401LoopIsRelayedNotRenewedAgain(t *testing.T) {
	// An upstream route that answers 401 whatever the token.
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers, Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/contacts/list" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`)
	if resp.StatusCode != 401 {
		t.Fatalf("status = %d, want the upstream's 401 relayed", resp.StatusCode)
	}
	resp, _ = g.Do(t, "POST", "/v1/contacts/list", `{}`)
	if resp.StatusCode != 401 {
		t.Fatalf("status = %d, want 401 relayed", resp.StatusCode)
	}
	if n := g.Sim.AuthCalls(); n != 2 {
		t.Fatalf("auth calls = %d, want 2: a young token obtained because of a 401 is not renewed again", n)
	}
}

func TestLargeBodyIsStreamedNotResentAfter401(t *testing.T) {
	// 4 MiB through the race detector on a loaded machine can take longer
	// than the default 5 s: the timeout is not what this test is about.
	g := gatewaytest.Start(t, gatewaytest.Options{UpstreamTimeout: time.Minute, Config: openCallers + `
routes:
  extra:
    - { name: faxes.send, method: POST, path: /v1/faxes/send }
`})
	big := `{"to_number":"+15551234567","file_data":"` + strings.Repeat("QUFB", 1<<20) + `"}` // ~4 MiB
	resp, body := g.Do(t, "POST", "/v1/faxes/send", big)
	if resp.StatusCode != 200 || !strings.Contains(body, "job_id") {
		t.Fatalf("4 MiB fax: %d %s", resp.StatusCode, body)
	}
	g.Sim.RevokeTokens()
	resp, _ = g.Do(t, "POST", "/v1/faxes/send", big)
	if resp.StatusCode != 401 {
		t.Fatalf("status = %d, want 401 relayed: a streamed body cannot be resent", resp.StatusCode)
	}
	resp, body = g.Do(t, "POST", "/v1/faxes/send", big)
	if resp.StatusCode != 200 {
		t.Fatalf("next request: %d %s, want 200 with the renewed token", resp.StatusCode, body)
	}
}

func TestBodyLimits(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + "server:\n  max_body_bytes: 1000\n  read_timeout: 300ms\n"})
	t.Run("content-length over the limit", func(t *testing.T) {
		resp, body := g.Do(t, "POST", "/v1/contacts/list", strings.Repeat("x", 1001))
		wantEnvelope(t, resp, body, 413, "body_too_large")
	})
	t.Run("chunked over the limit", func(t *testing.T) {
		req, _ := http.NewRequest("POST", g.URL+"/v1/contacts/list", struct{ *strings.Reader }{strings.NewReader(strings.Repeat("x", 5000))})
		req.ContentLength = -1
		resp, err := g.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		wantEnvelope(t, resp, b.String(), 413, "body_too_large")
	})
	t.Run("trickling body", func(t *testing.T) {
		c, err := net.Dial("tcp", g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"))
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		var out bytes.Buffer
		_, _ = out.ReadFrom(c)
		if !strings.HasPrefix(out.String(), "HTTP/1.1 408 ") || !strings.Contains(out.String(), `"error":"request_timeout"`) {
			t.Fatalf("answer = %q, want 408 request_timeout", out.String())
		}
	})
	t.Run("trickling body after a whole request on the connection", func(t *testing.T) {
		// The first request arrives whole, so its body needs no read
		// deadline (listener.Conn.BodyInMemory); the second's head arrives
		// alone and its body stalls: it must still be cut off.
		c, err := net.Dial("tcp", g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		_, _ = c.Write([]byte("POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("first request: %d, want 200", resp.StatusCode)
		}
		_, _ = c.Write([]byte("POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"))
		var out bytes.Buffer
		_, _ = out.ReadFrom(br)
		if !strings.HasPrefix(out.String(), "HTTP/1.1 408 ") || !strings.Contains(out.String(), `"error":"request_timeout"`) {
			t.Fatalf("answer = %q, want 408 request_timeout", out.String())
		}
	})
	// Bodies stream (replay.go): an over-limit or stalled body of unknown
	// length is cut off mid-way, so the upstream may see a request begin but
	// never a whole one, and its answer never reaches the caller.
	for _, rec := range g.Sim.Requests() {
		if rec.Path == "/v1/contacts/list" && rec.BodySize > 1000 {
			t.Errorf("the upstream received a body of %d bytes, over max_body_bytes", rec.BodySize)
		}
		if rec.Path == "/v1/contacts/list" && rec.BodySize == 100 {
			t.Errorf("the upstream received the trickling body whole")
		}
	}
}

func TestHeadersOver32KiBAre431(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	resp, body := g.Do(t, "GET", "/v1/esign_templates", "", "X-Big", strings.Repeat("a", 33<<10))
	wantEnvelope(t, resp, body, 431, "headers_too_large")
}

func TestMethodsNotForwardedAre405(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	for _, m := range []string{"OPTIONS", "HEAD", "TRACE", "PROPFIND"} {
		resp, body := g.Do(t, m, "/v1/contacts/list", "")
		if m == "HEAD" {
			if resp.StatusCode != 405 {
				t.Fatalf("HEAD: %d", resp.StatusCode)
			}
			continue
		}
		wantEnvelope(t, resp, body, 405, "method_not_allowed")
	}
	out := g.Raw(t, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 2*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 405 ") {
		t.Fatalf("CONNECT: %q", out)
	}
}

func TestUpgradeIsRemovedNeverSwitched(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	for _, hdr := range [][]string{
		{"Connection", "Upgrade", "Upgrade", "websocket"},
		// What curl --http2 sends on a plain http:// URL.
		{"Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"},
	} {
		resp, body := g.Do(t, "GET", "/v1/esign_templates", "", hdr...)
		if resp.StatusCode != 200 || resp.Header.Get("Upgrade") != "" {
			t.Fatalf("%v: %d %v %s, want a plain 200", hdr, resp.StatusCode, resp.Header, body)
		}
		rec := lastRecorded(t, g.Sim)
		for _, h := range []string{"Upgrade", "Connection", "Http2-Settings"} {
			if v, ok := rec.Header[h]; ok {
				t.Fatalf("upstream received %s: %q", h, v)
			}
		}
	}
}

func TestRequestID(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Request-Id", "abc.DEF_123-x")
	if got := resp.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != "abc.DEF_123-x" {
		t.Fatalf("response X-Request-Id = %q, want the caller's", got)
	}
	if got := lastRecorded(t, g.Sim).Header.Get("X-Request-Id"); got != "abc.DEF_123-x" {
		t.Fatalf("upstream X-Request-Id = %q", got)
	}
	for _, bad := range []string{"has space", strings.Repeat("a", 129), "semi;colon", "ünï"} {
		resp, _ = g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Request-Id", bad)
		got := resp.Header.Get("X-Request-Id")
		if got == bad || !strings.HasPrefix(got, "fg-") {
			t.Fatalf("invalid X-Request-Id %q kept as %q", bad, got)
		}
	}
	resp, _ = g.Do(t, "GET", "/nope", "")
	if resp.Header.Get("X-Request-Id") == "" {
		t.Fatal("gateway-made response without X-Request-Id")
	}
}

func TestSmugglingFramingIsRefusedOverRawTCP(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers})
	const smuggled = "POST /v1/numbers/delete HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 46\r\n\r\n{\"number_id\":\"num_1001\",\"order_id\":\"ord_5001\"}"
	for _, tc := range []struct{ name, raw string }{
		{"CL and TE", "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE and CL", "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE gzip", "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n" + smuggled},
		{"TE gzip, chunked", "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"two TE headers", "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE case", "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\ntRaNsFeR-eNcOdInG: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE obs-fold", "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n chunked\r\n\r\n0\r\n\r\n" + smuggled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := g.Raw(t, tc.raw, 2*time.Second)
			if !strings.HasPrefix(out, "HTTP/1.1 400 ") {
				t.Fatalf("answer = %q, want 400", out)
			}
			if strings.Count(out, "HTTP/1.1 ") != 1 {
				t.Fatalf("the connection served more than one answer: %q", out)
			}
			if strings.Contains(out, `"error"`) && !strings.Contains(out, `"error":"invalid_request"`) {
				t.Fatalf("answer = %q, want invalid_request", out)
			}
			if n := g.Sim.RouteCounts()["POST /v1/numbers/delete"]; n != 0 {
				t.Fatal("a smuggled numbers.delete reached the upstream")
			}
		})
	}
	// Plain chunked and pipelined keep-alive requests still work.
	out := g.Raw(t, "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"+
		"POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", 3*time.Second)
	if strings.Count(out, "HTTP/1.1 200 OK") != 2 {
		t.Fatalf("chunked + pipelined: %q", out)
	}
}

// Regression (review): a body trickled just under the read timeout could hold
// a goroutine and a buffer indefinitely; buffering now has an overall bound.
func TestSteadilyTricklingBodyIsCutOffAtTheUpstreamTimeout(t *testing.T) {
	const timeout = time.Second
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + "server:\n  read_timeout: 800ms\n",
		UpstreamTimeout: timeout})
	c, err := net.Dial("tcp", g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"))
	start := time.Now()
	done := make(chan string, 1)
	go func() {
		var out bytes.Buffer
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, _ = out.ReadFrom(c)
		done <- out.String()
	}()
	for i := 0; i < 50; i++ { // models a caller that trickles its body: a byte every 200ms, never the 800ms read timeout's pause
		select {
		case out := <-done:
			if !strings.HasPrefix(out, "HTTP/1.1 408 ") {
				t.Fatalf("answer = %q, want 408", out)
			}
			// Unbounded, it would trickle the whole 10 s; 3 s for a loaded
			// machine.
			if d := time.Since(start); d > timeout+3*time.Second {
				t.Fatalf("cut off after %v, want about the %v upstream timeout", d, timeout)
			}
			return
		case <-time.After(200 * time.Millisecond):
			_, _ = c.Write([]byte(" "))
		}
	}
	t.Fatal("the trickling body was never cut off")
}

// Responses stream: the caller reads the first part of a slow upstream
// answer before the upstream has written the rest.
func TestResponsesStreamToTheCaller(t *testing.T) {
	g, release := slowDownload(t, http.Header{"Content-Type": {"application/pdf"}}, "%PDF-1.7 first part\n", "second part\n")
	resp, err := g.Client.Get(g.URL + "/v1/faxes/download?job_id=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantStreamed(t, resp.Body, "%PDF-1.7 first part\n", "second part\n", release)
}

// TestResendMemoryIsReturned: the copies kept for a resend go back to the
// resend memory after each request. httputil.ReverseProxy (which forward.go
// replaced) never let the transport close the handler's body, so a copy
// released only on that Close was never released: after
// server.resend_buffer_bytes of copies (8 MiB by default then) no body was
// copied again, and every later 401 on such a body was relayed instead of
// resent.
func TestResendMemoryIsReturned(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + "server:\n  resend_buffer_bytes: 2097152\n"})
	head := `{"type":"individual","is_organization":false,"first_name":"A","last_name":"`
	body := head + strings.Repeat("B", 1<<20-len(head)-2) + `"}` // 1 MiB: copied, not read whole first
	for i := 0; i < 6; i++ {                                     // 6 MiB of copies through a 2 MiB cap
		if resp, b := g.Do(t, "POST", "/v1/contacts/create", body); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %.200s", i, resp.StatusCode, b)
		}
	}
	g.Sim.RevokeTokens()
	resp, b := g.Do(t, "POST", "/v1/contacts/create", body)
	if resp.StatusCode != 200 {
		t.Fatalf("after revocation: %d %.200s, want 200 after a resend", resp.StatusCode, b)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.Upstream401Retries.WithLabelValues("contacts.create")); got != 1 {
		t.Fatalf("faxgate_upstream_401_retries_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.Upstream401Unretried.WithLabelValues("contacts.create")); got != 0 {
		t.Fatalf("faxgate_upstream_401_unretried_total = %v, want 0: the copy was not kept", got)
	}
}
