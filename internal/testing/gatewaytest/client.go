package gatewaytest

// What a test does with a running gateway: requests (Do, Raw, Dial, a TLS
// client), its log lines, and the error envelope of its answers.

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// Do sends a request to the gateway and returns the response with its body read.
func (g *Gateway) Do(t testing.TB, method, path string, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, g.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
		req.ContentLength = 0
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	// hdr names replace the defaults above; a name given twice is sent twice.
	seen := map[string]bool{}
	for i := 0; i+1 < len(hdr); i += 2 {
		if k := http.CanonicalHeaderKey(hdr[i]); !seen[k] {
			seen[k] = true
			req.Header.Del(k)
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp, b.String()
}

// Raw writes raw bytes on a new TCP connection (over TLS, offering only
// http/1.1, when the gateway serves TLS) and returns everything the gateway
// answers until it closes the connection or the timeout passes.
func (g *Gateway) Raw(t testing.TB, raw string, timeout time.Duration) string {
	t.Helper()
	c, err := g.Dial(nil, timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(c)
	return out.String()
}

// Dial opens a connection to the proxy listener: TCP, or TLS with the
// harness's trust and client certificate when the gateway serves TLS, from
// local when set, offering only http/1.1.
func (g *Gateway) Dial(local net.Addr, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: local, Timeout: timeout}
	if g.tls == nil {
		return d.Dial("tcp", g.Addr)
	}
	return (&tls.Dialer{NetDialer: d, Config: g.TLSConfig(g.tls.ClientCert, false)}).Dial("tcp", g.Addr)
}

// TLSConfig is a client configuration for the gateway: its trust roots,
// cert presented when not nil, ALPN h2 and http/1.1, or http/1.1 only.
func (g *Gateway) TLSConfig(cert *tls.Certificate, h2 bool) *tls.Config {
	c := &tls.Config{RootCAs: g.tls.RootCAs, ServerName: "localhost", NextProtos: []string{"http/1.1"}}
	if h2 {
		c.NextProtos = []string{"h2", "http/1.1"}
	}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}

// TLSClient is an HTTP client for a TLS gateway presenting cert (none when
// nil), speaking h2 when h2 is set and HTTP/1.1 otherwise. Its
// connections close with the test.
func (g *Gateway) TLSClient(t testing.TB, cert *tls.Certificate, h2 bool) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true,
		TLSClientConfig: g.TLSConfig(cert, h2), ForceAttemptHTTP2: h2}
	var p http.Protocols
	p.SetHTTP1(!h2)
	p.SetHTTP2(h2)
	tr.Protocols = &p
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// Logs returns every log line written so far.
func (g *Gateway) Logs() string { return g.logs.String() }

// LastAccessLine waits for an access line of route, then returns the last
// one written so far.
func (g *Gateway) LastAccessLine(t testing.TB, route string) map[string]any {
	t.Helper()
	var line map[string]any
	eventually.Eventually(t, 5*time.Second, "the access line of "+route, func() bool {
		for _, l := range g.LogLines("request") {
			if l["route"] == route {
				line = l
			}
		}
		return line != nil
	})
	return line
}

// LogLines returns the log lines whose msg is msg, decoded.
func (g *Gateway) LogLines(msg string) []map[string]any { return g.logs.Lines(msg) }

// Envelope decodes a gateway error body.
func Envelope(t testing.TB, body string) (status int, message, code string) {
	t.Helper()
	var e struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not a JSON envelope: %q", body)
	}
	return e.Status, e.Message, e.Error
}
