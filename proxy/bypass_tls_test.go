package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

// The bypass corpus over TLS (docs/tls.md): the HTTP/1.1 cases as
// they are, through the framing sniffer under the TLS plaintext, and the
// path and header cases again as HTTP/2 requests. h2 has no request line,
// chunked framing, obs-fold or pipelining to abuse, but the same paths,
// methods and headers reach the same handler through another parser: the
// route decided must still be the route forwarded.

// startTLS starts a gateway serving TLS (mode files) with config.
func startTLS(t *testing.T, config string) *gatewaytest.Gateway {
	t.Helper()
	ca := tlstest.NewCA(t, "bypass CA")
	cert, key := ca.Server(t, "faxgate.test").WriteFiles(t, t.TempDir())
	return gatewaytest.Start(t, gatewaytest.Options{Config: config,
		TLS: &gatewaytest.TLS{CertFile: cert, KeyFile: key, RootCAs: ca.Pool()}})
}

func TestBypassCorpusUntrustedPeerOverTLS(t *testing.T) {
	runAttacks(t, startTLS(t, untrustedCallers), untrustedAttacks())
}

func TestBypassCorpusTrustedPeerOverTLS(t *testing.T) {
	runAttacks(t, startTLS(t, trustedCallers), trustedAttacks())
}

func TestBypassCorpusUntrustedPeerHTTP2(t *testing.T) {
	runH2Attacks(t, startTLS(t, untrustedCallers), untrustedAttacks())
}

func TestBypassCorpusTrustedPeerHTTP2(t *testing.T) {
	runH2Attacks(t, startTLS(t, trustedCallers), trustedAttacks())
}

// h2Want are the cases whose HTTP/2 answer differs from the HTTP/1.1 one,
// with why. In each, nothing still reaches the upstream that the case
// forbids (runH2Attack checks that as for every case).
var h2Want = map[string][]reply{
	// The sniffer refuses these request lines at HTTP/1; an h2 :path with
	// a space or two is a path, which the canonicaliser refuses.
	"space inside the target":       {gw(400, "invalid_path")},
	"two spaces before the version": {gw(400, "invalid_path")},
}

// runH2Attacks sends every case that has an HTTP/2 form as an h2 request.
func runH2Attacks(t *testing.T, g *gatewaytest.Gateway, cases []attack) {
	t.Helper()
	owned := len(g.Sim.OwnedNumbers())
	controls, ran := 0, 0
	clients := map[string]*http.Client{}
	for _, tc := range cases {
		if strings.HasPrefix(tc.name, goRefusedPrefix) {
			continue // HTTP/1 head syntax: no HTTP/2 form
		}
		req, ok := h2Form(tc.raw)
		if !ok {
			continue
		}
		c := clients[tc.from]
		if c == nil {
			c = h2Client(t, g, tc.from)
			clients[tc.from] = c
		}
		if w, ok := h2Want[tc.name]; ok {
			tc.want = w
		}
		sent := false
		t.Run(tc.name, func(t *testing.T) { sent = runH2Attack(t, g, c, req, tc) })
		if sent {
			ran++
			if tc.control {
				controls++
			}
		}
	}
	if ran < len(cases)/2 {
		t.Errorf("only %d of %d cases had an HTTP/2 form", ran, len(cases))
	}
	if controls != 1 {
		t.Errorf("%d control cases ran over h2, want 1", controls)
	}
	if got := len(g.Sim.OwnedNumbers()); got != owned-controls {
		t.Fatalf("owned numbers went from %d to %d, want exactly the %d control delete(s)", owned, got, controls)
	}
	t.Logf("%d of %d cases sent over HTTP/2", ran, len(cases))
}

// runH2Attack sends one request over h2 and checks it as runAttack does.
// It reports false when the h2 client itself refused to send the request
// (an invalid header value, say): such a request cannot reach the gateway
// over h2.
func runH2Attack(t *testing.T, g *gatewaytest.Gateway, c *http.Client, req *http.Request, tc attack) bool {
	g.Sim.Reset()
	u := *req.URL
	u.Host = g.Addr
	r := req.Clone(context.Background())
	r.URL = &u
	r.Body = io.NopCloser(bytes.NewReader(bodyOf(req)))
	resp, err := c.Do(r)
	if err != nil {
		if strings.Contains(err.Error(), "invalid") {
			t.Logf("not sent: the h2 client refuses it: %v", err)
			return false
		}
		// A header list over the h2 server's own limit (MaxHeaderBytes,
		// which the server advertises) is refused by the client once it
		// has the server's settings, and by the server otherwise (GOAWAY):
		// either way nothing was forwarded.
		if overH2Limit(tc) && (strings.Contains(err.Error(), "GOAWAY") || strings.Contains(err.Error(), "larger than peer's advertised limit")) {
			if n := len(g.Sim.Requests()); n != 0 {
				t.Errorf("the upstream received %d request(s)", n)
			}
			return true
		}
		t.Fatalf("h2: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("answered over HTTP/%d", resp.ProtoMajor)
	}
	if overH2Limit(tc) && resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge &&
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		tc.want = []reply{goServer(431)} // net/http's h2 server refused the head before any handler
	}
	checkExchange(t, g, tc, []response{{resp.StatusCode, resp.Header, string(b)}}, string(b))
	return true
}

// overH2Limit: the case's head is over the h2 server's own limit (4 times
// listener.MaxHeaderBytes, see listener.NewServer), where net/http, not the
// handler, refuses it.
func overH2Limit(tc attack) bool {
	return len(tc.want) == 1 && tc.want[0] == gw(431, "headers_too_large") && len(tc.raw) > 4*32<<10
}

// h2Form turns a case's raw HTTP/1.1 bytes into the h2 request carrying
// the same method, target and header fields, when there is one: a single
// request, not chunked (h2 has its own framing), in origin form (h2 has no
// absolute-form :path, and Go's client would send "//x" as a URL), not
// CONNECT.
func h2Form(raw string) (*http.Request, bool) {
	br := bufio.NewReader(strings.NewReader(raw))
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, false
	}
	if rest, _ := io.ReadAll(br); len(rest) > 0 {
		return nil, false
	}
	if req.ProtoMajor != 1 || req.ProtoMinor > 1 || // h2 has no version to spell
		len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 || req.Method == "CONNECT" ||
		!strings.HasPrefix(req.RequestURI, "/") || strings.HasPrefix(req.RequestURI, "//") {
		return nil, false
	}
	// h2 has no Connection header: a case about the headers Connection
	// names has no h2 form.
	for _, v := range req.Header.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if n := strings.TrimSpace(name); n != "" && !strings.EqualFold(n, "close") && !strings.EqualFold(n, "keep-alive") {
				return nil, false
			}
		}
	}
	h := req.Header.Clone()
	for _, k := range []string{"Connection", "Host", "Content-Length", "Expect"} {
		h.Del(k)
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // sent by Go's client otherwise: the head sizes must match
	}
	out := &http.Request{Method: req.Method, URL: &url.URL{Scheme: "https", Opaque: req.RequestURI},
		Header: h, Host: req.Host, ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body))}
	out = out.WithContext(context.WithValue(context.Background(), bodyKey{}, body))
	return out, true
}

type bodyKey struct{}

func bodyOf(r *http.Request) []byte {
	b, _ := r.Context().Value(bodyKey{}).([]byte)
	return b
}

// h2Client speaks h2 only, from the local address from when set.
func h2Client(t *testing.T, g *gatewaytest.Gateway, from string) *http.Client {
	var local net.Addr
	if from != "" {
		local = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	cfg := g.TLSConfig(nil, true)
	tr := &http.Transport{DisableCompression: true, TLSClientConfig: cfg, ForceAttemptHTTP2: true,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: local}, Config: cfg}
			return d.DialContext(ctx, network, addr)
		}}
	var p http.Protocols
	p.SetHTTP2(true)
	tr.Protocols = &p
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: rawTimeout}
}
