package gateway_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

// mtlsCallers: loopback is in no caller's CIDRs, so a request identified
// by nothing else is refused with unidentified_caller. The two SPIFFE IDs
// differ only by a last letter: matching by prefix would confuse them.
// svcCallers: every loopback peer is svc.
const svcCallers = `
log:
  level: debug
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
`

const mtlsCallers = `
log:
  level: debug
callers:
  list:
    - name: ops
      spiffe_ids: ["spiffe://faxgate.test/ns/a"]
      allow: ["*"]
    - name: other
      spiffe_ids: ["spiffe://faxgate.test/ns/ab"]
      allow: ["*"]
`

// tlsEnv is a server certificate and a client CA written for one test.
type tlsEnv struct {
	server, clients *tlstest.CA
	pair            tlstest.Pair
	dir             string
	opts            *gatewaytest.TLS
	pems            []tlstest.Pair // every pair written or presented: none may be logged
}

func newTLSEnv(t *testing.T, clientAuth string) *tlsEnv {
	t.Helper()
	e := &tlsEnv{server: tlstest.NewCA(t, "server CA"), clients: tlstest.NewCA(t, "client CA"), dir: t.TempDir()}
	e.pair = e.server.Server(t, "faxgate.test")
	e.pems = append(e.pems, e.pair)
	cert, key := e.pair.WriteFiles(t, e.dir)
	e.opts = &gatewaytest.TLS{CertFile: cert, KeyFile: key, RootCAs: e.server.Pool()}
	if clientAuth != "" {
		ca := filepath.Join(e.dir, "clients.pem")
		tlstest.WriteFile(t, ca, e.clients.CertPEM)
		e.opts.ClientCAFile, e.opts.ClientAuth = ca, clientAuth
	}
	return e
}

func (e *tlsEnv) client(t *testing.T, uris ...string) *tls.Certificate {
	p := e.clients.Client(t, uris...)
	e.pems = append(e.pems, p)
	return &p.TLS
}

// checkNoPEM: no log line holds a PEM header or any line of a certificate
// or key body the test wrote or presented, as docs/tls.md promises.
func (e *tlsEnv) checkNoPEM(t *testing.T, logs string) {
	t.Helper()
	if strings.Contains(logs, "-----BEGIN") || strings.Contains(logs, "PRIVATE KEY") {
		t.Errorf("the logs hold PEM")
	}
	for _, p := range e.pems {
		for _, b := range [][]byte{p.CertPEM, p.KeyPEM} {
			for _, line := range strings.Split(string(b), "\n") {
				if len(line) > 20 && !strings.HasPrefix(line, "-----") && strings.Contains(logs, line) {
					t.Errorf("the logs hold a certificate or key body line %q", line)
				}
			}
		}
	}
}

// lastCaller is the caller of the last access line.
func lastCaller(t *testing.T, g *gatewaytest.Gateway) string {
	t.Helper()
	lines := g.LogLines("request")
	if len(lines) == 0 {
		t.Fatal("no access line")
	}
	c, _ := lines[len(lines)-1]["caller"].(string)
	return c
}

// post sends POST url with an empty JSON object, and hdr.
func post(t *testing.T, c *http.Client, url string, hdr ...string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// handshakeErrors waits for the counter of reason to reach want: the
// server counts a failed handshake after the client may have seen it fail.
func handshakeErrors(t *testing.T, g *gatewaytest.Gateway, reason string, want float64) {
	t.Helper()
	eventually.EventuallyErr(t, 3*time.Second, fmt.Sprintf("faxgate_tls_handshake_errors_total{reason=%q} at %v", reason, want), func() error {
		if got := testutil.ToFloat64(g.Metrics.TLS.HandshakeErrors.WithLabelValues(reason)); got != want {
			return fmt.Errorf("it is %v", got)
		}
		return nil
	})
}

func TestTLSServesHTTP2AndHTTP1(t *testing.T) {
	e := newTLSEnv(t, "")
	g := gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: svcCallers})
	defer e.checkNoPEM(t, g.Logs())
	for _, tc := range []struct {
		name  string
		h2    bool
		major int
	}{{"h2", true, 2}, {"http/1.1", false, 1}} {
		resp, err := post(t, g.TLSClient(t, nil, tc.h2), g.URL+"/v1/contacts/list")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.StatusCode != 200 || resp.ProtoMajor != tc.major {
			t.Errorf("%s: %d over HTTP/%d, want 200 over HTTP/%d", tc.name, resp.StatusCode, resp.ProtoMajor, tc.major)
		}
		if c := lastCaller(t, g); c != "svc" {
			t.Errorf("%s: caller %q, want svc", tc.name, c)
		}
	}

	// The framing sniffer is under the TLS plaintext of HTTP/1.x.
	out := g.Raw(t, "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 400 ") || !strings.Contains(out, `"invalid_request"`) {
		t.Errorf("CL+TE over TLS: got %q, want 400 invalid_request", out)
	}
	out = g.Raw(t, "GET /v1/contacts/list HTTP/2.0\r\nHost: x\r\n\r\n", 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 505 ") {
		t.Errorf("HTTP/2.0 request line over TLS http/1.1: got %q, want 505", out)
	}

	// Plain HTTP on the TLS listener is never served.
	c, err := net.Dial("tcp", g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET /v1/contacts/list HTTP/1.1\r\nHost: x\r\n\r\n")
	plain, _ := io.ReadAll(c)
	c.Close()
	if strings.Contains(string(plain), "200 OK") || strings.Contains(string(plain), "contacts") {
		t.Errorf("plain HTTP on the TLS listener was answered: %q", plain)
	}
	handshakeErrors(t, g, "protocol", 1)

	// The certificate's expiry is exported under its first DNS name.
	resp, err := http.Get(g.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `faxgate_tls_certificate_expiry_timestamp_seconds{domain="faxgate.test"} `; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if resp, _ := http.Get(g.AdminURL + "/readyz"); resp == nil || resp.StatusCode != 200 {
		t.Errorf("/readyz not 200 with a certificate in hand")
	}
}

func TestTLSMinVersionAndHandshakeErrors(t *testing.T) {
	e := newTLSEnv(t, "")
	e.opts.MinVersion = "1.3"
	g := gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: svcCallers})
	defer e.checkNoPEM(t, g.Logs())

	cfg := g.TLSConfig(nil, true)
	cfg.MaxVersion = tls.VersionTLS12
	if c, err := tls.Dial("tcp", g.Addr, cfg); err == nil {
		c.Close()
		t.Fatal("a TLS 1.2 client got through min_version 1.3")
	}
	handshakeErrors(t, g, "protocol", 1)

	// A connection that closes mid-handshake is "other".
	c, err := net.Dial("tcp", g.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	handshakeErrors(t, g, "other", 1)
	handshakeErrors(t, g, "no_client_cert", 0)
	handshakeErrors(t, g, "bad_client_cert", 0)
}

func TestMTLSIdentity(t *testing.T) {
	e := newTLSEnv(t, "optional")
	g := gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: mtlsCallers})
	defer e.checkNoPEM(t, g.Logs())
	for _, tc := range []struct {
		name   string
		uris   []string
		hdr    []string
		caller string // "" = unidentified (403)
	}{
		{"exact ID", []string{"spiffe://faxgate.test/ns/a"}, nil, "ops"},
		{"the longer ID", []string{"spiffe://faxgate.test/ns/ab"}, nil, "other"},
		{"prefix of both IDs", []string{"spiffe://faxgate.test/ns"}, nil, ""},
		{"an ID extended", []string{"spiffe://faxgate.test/ns/a/b"}, nil, ""},
		{"an ID with a trailing slash", []string{"spiffe://faxgate.test/ns/a/"}, nil, ""},
		{"two IDs of different callers", []string{"spiffe://faxgate.test/ns/a", "spiffe://faxgate.test/ns/ab"}, nil, ""},
		{"one known ID beside an unknown one", []string{"spiffe://faxgate.test/x", "spiffe://faxgate.test/ns/a"}, nil, "ops"},
		{"no URI SAN", nil, nil, ""},
		{"identity header from an untrusted peer ignored", []string{"spiffe://faxgate.test/ns/ab"},
			[]string{"X-Faxgate-Caller", "ops", "X-Forwarded-Client-Cert", "URI=spiffe://faxgate.test/ns/a"}, "other"},
	} {
		for _, h2 := range []bool{true, false} {
			name := tc.name + map[bool]string{true: " h2", false: " http1"}[h2]
			t.Run(name, func(t *testing.T) {
				resp, err := post(t, g.TLSClient(t, e.client(t, tc.uris...), h2), g.URL+"/v1/contacts/list", tc.hdr...)
				if err != nil {
					t.Fatal(err)
				}
				want := 200
				if tc.caller == "" {
					want = 403
				}
				if resp.StatusCode != want {
					t.Fatalf("status %d, want %d", resp.StatusCode, want)
				}
				if got := lastCaller(t, g); got != tc.caller && !(tc.caller == "" && got == "unidentified") {
					t.Errorf("caller %q, want %q", got, tc.caller)
				}
			})
		}
	}

	// optional: no certificate is fine (and identifies nobody here). A
	// certificate that fails verification is refused at the handshake:
	// TestMTLSOptionalRefusesInvalidCertificates.
	if resp, err := post(t, g.TLSClient(t, nil, true), g.URL+"/v1/contacts/list"); err != nil || resp.StatusCode != 403 {
		t.Errorf("no certificate: %v %v, want 403 unidentified", resp, err)
	}
	handshakeErrors(t, g, "bad_client_cert", 0)
	handshakeErrors(t, g, "no_client_cert", 0)
}

// mtlsOrCIDRCallers: a verified certificate with ops's SPIFFE ID names ops;
// every loopback peer is also svc by its address, the identity a client
// without a certificate gets.
const mtlsOrCIDRCallers = `
log:
  level: debug
callers:
  list:
    - name: ops
      spiffe_ids: ["spiffe://faxgate.test/ns/a"]
      allow: ["*"]
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
`

// TestMTLSOptionalRefusesInvalidCertificates pins what client_auth:
// optional means when a client presents a certificate that fails
// verification (docs/tls.md): the handshake fails, over h2 and
// HTTP/1.1, and is counted as bad_client_cert. The client is never served
// under the identity it would have had without a certificate (its
// address here): a foreign, expired or wrongly issued certificate is an
// attack or a misconfigured caller, and either must show, not be hidden
// behind a CIDR match. A client that presents no certificate is identified
// as usual, and a valid certificate still comes first.
func TestMTLSOptionalRefusesInvalidCertificates(t *testing.T) {
	e := newTLSEnv(t, "optional")
	g := gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: mtlsOrCIDRCallers})
	defer e.checkNoPEM(t, g.Logs())
	const id = "spiffe://faxgate.test/ns/a"

	for _, h2 := range []bool{true, false} {
		if resp, err := post(t, g.TLSClient(t, nil, h2), g.URL+"/v1/contacts/list"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("h2 %v, no certificate: %v %v, want 200 by address", h2, resp, err)
		}
		if c := lastCaller(t, g); c != "svc" {
			t.Errorf("h2 %v, no certificate: caller %q, want svc (by address)", h2, c)
		}
		if resp, err := post(t, g.TLSClient(t, e.client(t, id), h2), g.URL+"/v1/contacts/list"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("h2 %v, valid certificate: %v %v", h2, resp, err)
		}
		if c := lastCaller(t, g); c != "ops" {
			t.Errorf("h2 %v, valid certificate: caller %q, want ops (the certificate before the address)", h2, c)
		}
	}

	now := time.Now()
	// crypto/tls answers each with an alert (unknown_ca, certificate_expired,
	// bad_certificate); which error the client then reports depends on
	// timing and protocol (h2 says only that no connection was made), so
	// the test does not pin it.
	bad := []struct {
		name string
		pair tlstest.Pair
	}{
		{"certificate from an untrusted CA", tlstest.NewCA(t, "foreign CA").Client(t, id)},
		{"expired certificate from the trusted CA", e.clients.Issue(t, tlstest.Leaf{URIs: []string{id}, Client: true,
			NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)})},
		{"not yet valid certificate from the trusted CA", e.clients.Issue(t, tlstest.Leaf{URIs: []string{id}, Client: true,
			NotBefore: now.Add(time.Hour), NotAfter: now.Add(48 * time.Hour)})},
		{"server certificate from the trusted CA", e.clients.Issue(t, tlstest.Leaf{URIs: []string{id}})},
	}
	refused := 0.0
	for _, tc := range bad {
		e.pems = append(e.pems, tc.pair)
		for _, h2 := range []bool{true, false} {
			t.Run(tc.name+map[bool]string{true: " h2", false: " http1"}[h2], func(t *testing.T) {
				lines, forwarded := len(g.LogLines("request")), len(g.Sim.Requests())
				// Go's client only offers a certificate that fits what
				// the server asks for; a misconfigured or hostile client
				// offers it anyway.
				c := g.TLSClient(t, nil, h2)
				c.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					return &tc.pair.TLS, nil
				}
				resp, err := post(t, c, g.URL+"/v1/contacts/list")
				if err == nil {
					t.Fatalf("status %d (caller %q), want a failed handshake", resp.StatusCode, lastCaller(t, g))
				}
				refused++
				handshakeErrors(t, g, "bad_client_cert", refused)
				if n := len(g.LogLines("request")); n != lines {
					t.Errorf("%d access line(s) written: the request reached the handler", n-lines)
				}
				if n := len(g.Sim.Requests()); n != forwarded {
					t.Errorf("the upstream received %d request(s)", n-forwarded)
				}
			})
		}
	}
	handshakeErrors(t, g, "no_client_cert", 0)
}

func TestMTLSRequire(t *testing.T) {
	e := newTLSEnv(t, "require")
	g := gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: mtlsCallers})
	defer e.checkNoPEM(t, g.Logs())
	for _, h2 := range []bool{true, false} {
		if resp, err := post(t, g.TLSClient(t, nil, h2), g.URL+"/v1/contacts/list"); err == nil {
			t.Fatalf("no certificate with require: %d, want a failed handshake", resp.StatusCode)
		}
	}
	handshakeErrors(t, g, "no_client_cert", 2)
	resp, err := post(t, g.TLSClient(t, e.client(t, "spiffe://faxgate.test/ns/a"), true), g.URL+"/v1/contacts/list")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("valid certificate with require: %v %v", resp, err)
	}
	if c := lastCaller(t, g); c != "ops" {
		t.Errorf("caller %q, want ops", c)
	}
}

// TestMTLSBesideTrustedProxy: with mTLS on, a trusted proxy's
// X-Forwarded-Client-Cert still names callers, and a verified certificate
// comes first.
func TestMTLSBesideTrustedProxy(t *testing.T) {
	e := newTLSEnv(t, "optional")
	g := gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: strings.Replace(mtlsCallers, "callers:\n", "callers:\n  trusted_proxies: [\"127.0.0.0/8\"]\n", 1)})
	defer e.checkNoPEM(t, g.Logs())
	xfcc := []string{"X-Forwarded-Client-Cert", "By=spiffe://faxgate.test/mesh;URI=spiffe://faxgate.test/ns/a"}
	if resp, err := post(t, g.TLSClient(t, nil, true), g.URL+"/v1/contacts/list", xfcc...); err != nil || resp.StatusCode != 200 {
		t.Fatalf("XFCC from the trusted proxy: %v %v", resp, err)
	}
	if c := lastCaller(t, g); c != "ops" {
		t.Errorf("XFCC: caller %q, want ops", c)
	}
	if resp, err := post(t, g.TLSClient(t, e.client(t, "spiffe://faxgate.test/ns/ab"), true), g.URL+"/v1/contacts/list", xfcc...); err != nil || resp.StatusCode != 200 {
		t.Fatalf("certificate and XFCC: %v %v", resp, err)
	}
	if c := lastCaller(t, g); c != "other" {
		t.Errorf("certificate and XFCC: caller %q, want other (the certificate)", c)
	}
	if n := len(g.Sim.Requests()); n == 0 {
		t.Fatal("nothing forwarded")
	}
	for _, r := range g.Sim.Requests() {
		if _, ok := r.Header["X-Forwarded-Client-Cert"]; ok {
			t.Errorf("X-Forwarded-Client-Cert forwarded")
		}
	}
}

// servedName is the first DNS name of the certificate the gateway presents.
func servedName(t *testing.T, g *gatewaytest.Gateway) string {
	t.Helper()
	c, err := tls.Dial("tcp", g.Addr, g.TLSConfig(nil, false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].DNSNames[0]
}

// TestTLSCertificateFilesReload: a renewal written over the files is served
// without a restart; a broken pair keeps the certificate in use and says
// why in one log line.
func TestTLSCertificateFilesReload(t *testing.T) {
	e := newTLSEnv(t, "")
	g := gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: svcCallers})
	defer e.checkNoPEM(t, g.Logs())
	if n := servedName(t, g); n != "faxgate.test" {
		t.Fatalf("served %s", n)
	}
	waitServed := func(want string) {
		t.Helper()
		eventually.EventuallyErr(t, 5*time.Second, "serving "+want, func() error {
			if servedName(t, g) != want {
				return fmt.Errorf("logs:\n%s", g.Logs())
			}
			return nil
		})
	}
	renewed := e.server.Server(t, "renewed.faxgate.test")
	e.pems = append(e.pems, renewed)
	renewed.WriteFiles(t, e.dir)
	waitServed("renewed.faxgate.test")

	other := e.server.Server(t, "other.faxgate.test")
	e.pems = append(e.pems, other)
	tlstest.WriteFile(t, e.opts.KeyFile, other.KeyPEM)
	eventually.EventuallyErr(t, 5*time.Second, "a log line for the broken pair", func() error {
		if len(g.LogLines("TLS certificate files not loaded; keeping the certificate in use")) == 0 {
			return fmt.Errorf("logs:\n%s", g.Logs())
		}
		return nil
	})
	if n := servedName(t, g); n != "renewed.faxgate.test" {
		t.Errorf("after a broken pair: served %s, want renewed.faxgate.test kept", n)
	}
	if resp, _ := http.Get(g.AdminURL + "/readyz"); resp == nil || resp.StatusCode != 200 {
		t.Errorf("/readyz not 200 with the old certificate in hand")
	}
}

// startHeldTLS starts a TLS gateway whose upstream holds every
// /v1/contacts/list request: entered receives one value as such a request
// arrives, and closing release lets them all go on.
func startHeldTLS(t *testing.T, e *tlsEnv) (g *gatewaytest.Gateway, entered chan struct{}, release chan struct{}) {
	t.Helper()
	release = make(chan struct{})
	entered = make(chan struct{}, 1)
	g = gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: svcCallers, Wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/contacts/list" {
				entered <- struct{}{}
				<-release
			}
			h.ServeHTTP(w, r)
		})
	}})
	return g, entered, release
}

// TestTLSDrainHTTP2: on shutdown an h2 connection gets GOAWAY, the request
// in flight on it finishes, and Run returns after a clean drain.
func TestTLSDrainHTTP2(t *testing.T) {
	e := newTLSEnv(t, "")
	g, entered, release := startHeldTLS(t, e)
	client := g.TLSClient(t, nil, true)
	var wg sync.WaitGroup
	var status int
	var proto int
	var reqErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := post(t, client, g.URL+"/v1/contacts/list")
		reqErr = err
		if err == nil {
			status, proto = resp.StatusCode, resp.ProtoMajor
		}
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- g.Shutdown() }()
	// The listener closes and readiness goes at once; the request in
	// flight is still being served.
	eventually.Eventually(t, 5*time.Second, "the listener to refuse during the drain", func() bool {
		c, err := net.DialTimeout("tcp", g.Addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	select {
	case err := <-stopped:
		t.Fatalf("Run returned %v with a request in flight", err)
	default:
	}
	close(release)
	wg.Wait()
	if reqErr != nil || status != 200 || proto != 2 {
		t.Fatalf("in-flight h2 request: status %d proto %d err %v, want 200 over HTTP/2", status, proto, reqErr)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run = %v, want a clean drain", err)
	}
}

// TestTLSDrainSendsGOAWAY reads the frames of an h2 connection with a
// request in flight while the gateway drains: a GOAWAY comes first, then
// the in-flight response, complete.
func TestTLSDrainSendsGOAWAY(t *testing.T) {
	e := newTLSEnv(t, "")
	g, entered, release := startHeldTLS(t, e)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	c, err := tls.Dial("tcp", g.Addr, g.TLSConfig(nil, true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "localhost"},
		{":path", "/v1/contacts/list"}, {"content-type", "application/json"}, {"content-length", "2"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- g.Shutdown() }()

	goaway, status, ended := false, "", false
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			status = f.Value
		}
	})
	for !ended {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v (GOAWAY seen %v, status %q)", err, goaway, status)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo {
				t.Fatalf("GOAWAY with %v, want NO_ERROR", f.ErrCode)
			}
			if !goaway {
				goaway = true
				close(release) // now let the in-flight request finish
			}
		case *http2.HeadersFrame:
			if !goaway {
				t.Fatal("the response came before any GOAWAY")
			}
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				t.Fatal(err)
			}
			ended = f.StreamEnded()
		case *http2.DataFrame:
			ended = f.StreamEnded()
		}
	}
	if status != "200" {
		t.Fatalf("in-flight response :status %q, want 200", status)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run = %v, want a clean drain", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the drain did not end")
	}
}

// TestTLSAuditOverHTTP2: a request to a sensitive route over h2 is audited
// like one over HTTP/1.1, with the caller its certificate names.
func TestTLSAuditOverHTTP2(t *testing.T) {
	e := newTLSEnv(t, "optional")
	g := gatewaytest.Start(t, gatewaytest.Options{TLS: e.opts, Config: mtlsCallers})
	req, err := http.NewRequest("POST", g.URL+"/v1/numbers/delete", strings.NewReader(`{"number_id":"num_1001","order_id":"ord_5001"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.TLSClient(t, e.client(t, "spiffe://faxgate.test/ns/a"), true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 403 {
		t.Fatalf("%d over HTTP/%d, want 403 over h2 (ops is not granted numbers.delete here)", resp.StatusCode, resp.ProtoMajor)
	}
	lines := g.LogLines("audit")
	if len(lines) != 1 {
		t.Fatalf("%d audit lines, want 1:\n%s", len(lines), g.Logs())
	}
	a := lines[0]
	if a["caller"] != "ops" || a["route"] != "numbers.delete" || a["decision"] != "denied" || a["reason"] != "forbidden" || a["number_id"] != "num_1001" {
		t.Errorf("audit line %v", a)
	}
	e.checkNoPEM(t, g.Logs())
}
