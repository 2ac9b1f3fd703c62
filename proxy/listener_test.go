package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/proxy/listener"
	"github.com/faxgate/faxgate/tokencache"
)

// connCallers is openCallers from proxy_test.go: loopback is caller "svc".
const connCallers = `
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
rate_limit:
  default: { rps: 1000, burst: 1000 }
`

// startGateway runs the real handler and server behind the real listener
// (package listener), in front of a real faxsim, as gatewaytest does (which
// this package's internal tests cannot import).
func startGateway(t *testing.T) (addr string, sim *faxsim.Sim) {
	return startGatewayWith(t, &http.Transport{DisableCompression: true})
}

// startGatewayWith is startGateway with the given upstream transport.
func startGatewayWith(t *testing.T, tr *http.Transport) (addr string, sim *faxsim.Sim) {
	addr, sim, _ = startGatewayUpstream(t, tr, nil)
	return addr, sim
}

// startGatewayUpstream is startGatewayWith with the simulator wrapped by
// wrap (when not nil), and also returns the handler.
func startGatewayUpstream(t *testing.T, tr *http.Transport, wrap func(http.Handler) http.Handler) (addr string, sim *faxsim.Sim, h *Handler) {
	return startGatewayConns(t, tr, wrap, nil)
}

// startGatewayConns is startGatewayUpstream with every accepted connection
// passed through conn (when not nil) before the listener's sniffer.
func startGatewayConns(t *testing.T, tr *http.Transport, wrap func(http.Handler) http.Handler, conn func(net.Conn) net.Conn) (addr string, sim *faxsim.Sim, h *Handler) {
	const key = "sk_test_conn-0123456789"
	sim = faxsim.New(faxsim.Options{APIKey: key})
	var upstream http.Handler = sim
	if wrap != nil {
		upstream = wrap(sim)
	}
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	cfg, err := config.Parse([]byte(fmt.Sprintf("upstream:\n  base_url: %q\n  api_key_env: K\n%s", up.URL, connCallers)),
		func(string) (string, bool) { return key, true })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	log, met := zap.NewNop(), NewMetrics(reg)
	t.Cleanup(tr.CloseIdleConnections)
	tokens := tokencache.NewManager(tokencache.Options{
		Fetcher: tokencache.NewClient(up.URL, tr, 5*time.Second, tokencache.StaticKey(tokencache.NewSecret(key)), clock.Real{}),
		Clock:   clock.Real{}, RefreshBefore: cfg.Token.RefreshBefore, RetryMin: cfg.Token.RetryMin,
		RetryMax: cfg.Token.RetryMax, Metrics: tokencache.NewMetrics(reg), Logger: log,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tokens.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	rules, err := policy.Compile(cfg.RuleSections(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(up.URL)
	h = New(Options{Upstream: base, Transport: tr, Tokens: tokens, Rules: rules, MaxBodyBytes: cfg.Server.MaxBodyBytes, ResendBufferBytes: cfg.Server.ResendBufferBytes,
		ReadTimeout: cfg.Server.ReadTimeout, UpstreamTimeout: cfg.Upstream.Timeout, Metrics: met, Logger: log})
	var ln net.Listener
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if conn != nil {
		ln = connListener{ln, conn}
	}
	srv := listener.NewServer(h, listener.ServerOptions{ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout, IdleTimeout: cfg.Server.IdleTimeout, Logger: log})
	go func() { _ = srv.Serve(listener.Wrap(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if _, err := tokens.Token(wctx); err != nil {
		t.Fatalf("no first token: %v", err)
	}
	return ln.Addr().String(), sim, h
}

// connListener passes every connection it accepts through conn.
type connListener struct {
	net.Listener
	conn func(net.Conn) net.Conn
}

func (l connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.conn(c), nil
}

// forwarded counts the requests the upstream received, token calls aside.
func forwarded(sim *faxsim.Sim) int {
	n := 0
	for _, r := range sim.Requests() {
		if r.Path != "/v1/auth" {
			n++
		}
	}
	return n
}

// rawExchange writes parts on a new connection, pausing between them so
// each arrives in its own read, and returns everything answered.
func rawExchange(t *testing.T, addr string, parts ...string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { // the server may stop reading early
		for _, p := range parts {
			if _, err := io.WriteString(c, p); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // models a peer whose parts arrive in reads of their own
		}
	}()
	var out bytes.Buffer
	_, _ = out.ReadFrom(c)
	return out.String()
}

func TestRefusedFramingConsumesLargeBodiesAndHeads(t *testing.T) {
	addr, sim := startGateway(t)
	const post = "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\n"
	const smuggled = post + "Content-Length: 2\r\n\r\n{}"
	body := strings.Repeat(smuggled, 40<<10/len(smuggled)) // >16 KiB of requests-to-be
	cl := "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	pad := func(n int) string { return "X-Pad: " + strings.Repeat("p", n) + "\r\n" }
	for _, tc := range []struct {
		name  string
		parts []string
		ok    int // requests answered 200 before the refused one
		// refusal is the refused one's status line and error code: 400
		// invalid_request unless set. A head over 32 KiB is refused as such
		// before its framing is looked at.
		refusal, code string
	}{
		{"CL and TE, big body", []string{post + cl + "Transfer-Encoding: chunked\r\n\r\n" + body + smuggled}, 0, "", ""},
		{"TE gzip and CL, big body", []string{post + "Transfer-Encoding: gzip\r\n" + cl + "\r\n" + body + smuggled}, 0, "", ""},
		{"20 KiB head, CL and TE", []string{post + pad(20<<10) + cl + "Transfer-Encoding: chunked\r\n\r\n" + body + smuggled}, 0, "", ""},
		{"40 KiB head, CL and TE", []string{post + pad(40<<10) + cl + "Transfer-Encoding: chunked\r\n\r\n" + body + smuggled}, 0,
			"431 ", "headers_too_large"},
		{"folded CL first", []string{post + "Content-Length:\r\n 2\r\n\r\n{}" +
			post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled}, 1, "", ""},
		{"CRLF after a POST, then a head in pieces", []string{smuggled + "\r\nPO", "ST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-",
			"Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled}, 1, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := forwarded(sim)
			out := rawExchange(t, addr, tc.parts...)
			if tc.refusal == "" {
				tc.refusal, tc.code = "400 ", "invalid_request"
			}
			answers := strings.Split(out, "HTTP/1.1 ")[1:]
			if len(answers) != tc.ok+1 || !strings.HasPrefix(answers[tc.ok], tc.refusal) ||
				!strings.Contains(answers[tc.ok], `"error":"`+tc.code+`"`) {
				t.Fatalf("answers = %.600q, want %d times 200, then %s%s and the connection closed", out, tc.ok, tc.refusal, tc.code)
			}
			if got := forwarded(sim) - before; got != tc.ok {
				t.Fatalf("the upstream received %d requests, want %d", got, tc.ok)
			}
		})
	}
	t.Run("big heads still keep alive", func(t *testing.T) {
		get := "GET /v1/esign_templates HTTP/1.1\r\nHost: x\r\n" + pad(20<<10) + "\r\n"
		out := rawExchange(t, addr, get+get+post+"Connection: close\r\nContent-Length: 2\r\n\r\n{}")
		if n := strings.Count(out, "HTTP/1.1 200 OK"); n != 3 {
			t.Fatalf("%d of 3 pipelined requests answered 200: %.600q", n, out)
		}
	})
}

// A caller that sends the listener's marker headers itself only refuses its
// own request: it is answered the refusal the marker names, on a connection
// that closes, nothing reaches the upstream, and the next request is served.
func TestMarkersSentByACallerRefuseOnlyItsOwnRequest(t *testing.T) {
	addr, sim := startGateway(t)
	const get = "GET /v1/esign_templates HTTP/1.1\r\nHost: x\r\n"
	for _, tc := range []struct{ marker, status, code string }{
		{"X-Faxgate-Refused: headers_too_large", "431 ", "headers_too_large"},
		{"X-Faxgate-Refused: invalid_header", "400 ", "invalid_request"},
		{"X-Faxgate-Refused: please", "400 ", "invalid_request"},
		{"X-Faxgate-Both-Te: chunked", "400 ", "invalid_request"},
	} {
		t.Run(tc.marker, func(t *testing.T) {
			before := forwarded(sim)
			out := rawExchange(t, addr, get+tc.marker+"\r\n\r\n"+get+"\r\n")
			if !strings.HasPrefix(out, "HTTP/1.1 "+tc.status) || !strings.Contains(out, `"error":"`+tc.code+`"`) ||
				!strings.Contains(out, "Connection: close") || strings.Count(out, "HTTP/1.1 ") != 1 {
				t.Fatalf("answers = %.600q, want one %s%s and the connection closed", out, tc.status, tc.code)
			}
			if got := forwarded(sim) - before; got != 0 {
				t.Fatalf("the upstream received %d requests", got)
			}
			if out := rawExchange(t, addr, get+"Connection: close\r\n\r\n"); !strings.HasPrefix(out, "HTTP/1.1 200 ") {
				t.Fatalf("the next request: %.300q", out)
			}
		})
	}
}
