package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/pebbletest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

// acmeGateway is a gateway in mode acme, running.
type acmeGateway struct {
	g     *Gateway
	logs  *syncBuffer
	proxy string // host:port of the proxy listener
	admin string
	done  chan error
}

// startACMEGateway runs a gateway whose proxy listener is on listen and
// whose server.tls section is tlsYAML (indented under server:).
func startACMEGateway(t *testing.T, upstream, listen, tlsYAML, extra string) *acmeGateway {
	t.Helper()
	yaml := strings.Replace(testConfigYAML(upstream, `"contacts.*"`), `  listen: "127.0.0.1:0"
  shutdown_timeout`, `  listen: "`+listen+`"
`+tlsYAML+`  shutdown_timeout`, 1) + extra
	cfg, err := config.Parse([]byte(yaml), testGetenv)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	if p := config.CheckEnvironment(cfg, testGetenv); len(p) > 0 {
		t.Fatalf("environment: %v", p)
	}
	buf := &syncBuffer{}
	logs, err := NewLogs(cfg.Log, buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Deps{Logs: logs, Registry: prometheus.NewRegistry(), Getenv: testGetenv, Version: "test",
		RedisOpTimeout: time.Second})
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &acmeGateway{g: g, logs: buf, done: make(chan error, 1)}
	addrs := make(chan [2]string, 1)
	go func() { a.done <- g.Run(ctx, RunOptions{Ready: func(p, ad string) { addrs <- [2]string{p, ad} }}) }()
	select {
	case x := <-addrs:
		a.proxy, a.admin = x[0], x[1]
	case err := <-a.done:
		cancel()
		t.Fatalf("gateway did not start: %v\n%s", err, buf.String())
	}
	t.Cleanup(func() {
		cancel()
		<-a.done
		if t.Failed() {
			t.Logf("gateway %s logs:\n%s", a.proxy, buf.String())
		}
	})
	return a
}

func (a *acmeGateway) readyz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + a.admin + "/readyz")
	if err != nil {
		t.Fatalf("readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReady waits until /readyz is 200: the certificate is in hand.
func (a *acmeGateway) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	eventually.EventuallyErr(t, within, "gateway "+a.proxy+" ready", func() error {
		if code, body := a.readyz(t); code != http.StatusOK {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})
}

// served is the certificate the gateway's proxy listener presents for
// "localhost", verified against roots, and the result of a request through
// it.
func (a *acmeGateway) served(t *testing.T, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Post("https://"+a.proxy+"/v1/contacts/list", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("HTTPS through %s: %v", a.proxy, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTPS through %s: %s", a.proxy, resp.Status)
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatal("no TLS state")
	}
	return resp.TLS.PeerCertificates[0]
}

func acmeUpstream(t *testing.T) string {
	sim := faxsim.New(faxsim.Options{APIKey: testKey})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	return up.URL
}

// TestACMEObtainsFromPebble: a gateway in mode acme obtains its certificate
// from a real ACME server (Pebble) by tls-alpn-01 on its own proxy listener,
// with client_auth require in force (the validation presents no client
// certificate), is not ready until then, and then serves HTTPS with it: a
// client trusting Pebble's issuing root succeeds.
func TestACMEObtainsFromPebble(t *testing.T) {
	port := pebbletest.FreePort(t)
	peb := pebbletest.Start(t, pebbletest.Options{TLSPort: port, HTTPPort: pebbletest.FreePort(t)})
	// A client CA, so that client_auth require is in force.
	clients := tlstest.NewCA(t, "client CA")
	caFile := filepath.Join(t.TempDir(), "clients.pem")
	tlstest.WriteFile(t, caFile, clients.CertPEM)
	client := clients.Client(t, "spiffe://faxgate.test/ns/a")
	tlsYAML := fmt.Sprintf(`  tls:
    mode: acme
    client_ca_file: %q
    client_auth: require
    acme:
      domains: ["localhost"]
      email: "ops@faxgate.test"
      directory: %q
      ca_root_file: %q
      storage_path: %q
`, caFile, peb.Directory, peb.CAFile, t.TempDir())
	a := startACMEGateway(t, acmeUpstream(t), fmt.Sprintf("127.0.0.1:%d", port), tlsYAML, "")
	a.waitReady(t, 25*time.Second)
	if n := peb.Orders(); n != 1 {
		t.Errorf("Pebble saw %d orders, want 1", n)
	}
	roots := peb.Roots(t)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost",
		Certificates: []tls.Certificate{client.TLS}}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post("https://"+a.proxy+"/v1/contacts/list",
		"application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("HTTPS with the ACME certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTPS: %s", resp.Status)
	}
	leaf := resp.TLS.PeerCertificates[0]
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "localhost" {
		t.Errorf("served certificate names %v", leaf.DNSNames)
	}
	if got := testutil.ToFloat64(a.g.Metrics.TLS.CertExpiry.WithLabelValues("localhost")); got != float64(leaf.NotAfter.Unix()) {
		t.Errorf("expiry metric = %v, want %d", got, leaf.NotAfter.Unix())
	}
	if logs := a.logs.String(); strings.Contains(logs, "-----BEGIN") || strings.Contains(logs, "PRIVATE KEY") {
		t.Errorf("the logs hold PEM")
	}
}

// TestACMEHTTP01OnHTTPListen: with acme.http_listen set, http-01 is
// answered there. Pebble's tls-alpn-01 port leads nowhere, so only http-01
// can validate the order.
func TestACMEHTTP01OnHTTPListen(t *testing.T) {
	httpPort := pebbletest.FreePort(t)
	peb := pebbletest.Start(t, pebbletest.Options{TLSPort: pebbletest.FreePort(t), HTTPPort: httpPort})
	tlsYAML := fmt.Sprintf(`  tls:
    mode: acme
    acme:
      domains: ["localhost"]
      directory: %q
      ca_root_file: %q
      storage_path: %q
      http_listen: "127.0.0.1:%d"
`, peb.Directory, peb.CAFile, t.TempDir(), httpPort)
	a := startACMEGateway(t, acmeUpstream(t), "127.0.0.1:0", tlsYAML, "")
	a.waitReady(t, 30*time.Second)
	if !strings.Contains(a.logs.String(), `"challenge":"http-01"`) {
		t.Errorf("no http-01 challenge was served:\n%s", a.logs.String())
	}
	a.served(t, peb.Roots(t))
	// Anything but a challenge on the http-01 listener is 404.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/contacts/list", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("http-01 listener answered %s to a non-challenge request", resp.Status)
	}
}

// TestACMENotReadyWhileTheCAIsUnreachable: with a directory nobody
// answers, serve still starts (certmagic's ManageAsync), /readyz says why it
// is not ready, and the log says why the certificate is missing.
func TestACMENotReadyWhileTheCAIsUnreachable(t *testing.T) {
	dead := pebbletest.FreePort(t)
	tlsYAML := fmt.Sprintf(`  tls:
    mode: acme
    acme:
      domains: ["localhost"]
      directory: "https://127.0.0.1:%d/dir"
      storage_path: %q
`, dead, t.TempDir())
	a := startACMEGateway(t, acmeUpstream(t), "127.0.0.1:0", tlsYAML, "")
	eventually.EventuallyErr(t, 10*time.Second, "a log line naming the unreachable directory", func() error {
		if !strings.Contains(a.logs.String(), "127.0.0.1:"+fmt.Sprint(dead)) {
			return fmt.Errorf("logs:\n%s", a.logs.String())
		}
		return nil
	})
	code, body := a.readyz(t)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no TLS certificate yet for localhost") {
		t.Fatalf("readyz = %d %s", code, body)
	}
	// The failed order is counted too, for alerts: certmagic emits its
	// event just after the log line.
	failures := a.g.Metrics.TLS.ACMEFailures.WithLabelValues("localhost", "obtain")
	eventually.Eventually(t, 5*time.Second, `faxgate_tls_acme_failures_total{domain="localhost",op="obtain"} above 0`,
		func() bool { return testutil.ToFloat64(failures) >= 1 })
	if n := testutil.ToFloat64(a.g.Metrics.TLS.ACMEFailures.WithLabelValues("localhost", "renew")); n != 0 {
		t.Errorf("renew failures = %v, want 0", n)
	}
}

// TestACMERedisStorageOneOrderForTheFleet: three gateways sharing a real
// redis-server as acme.storage, started together, place one ACME order
// between them, and all serve the same certificate.
func TestACMERedisStorageOneOrderForTheFleet(t *testing.T) {
	rs := redistest.Start(t)
	ports := []int{pebbletest.FreePort(t), pebbletest.FreePort(t), pebbletest.FreePort(t)}
	// Pebble validates on the first gateway's port; an order placed by
	// another replica is answered there too, through the shared storage.
	peb := pebbletest.Start(t, pebbletest.Options{TLSPort: ports[0], HTTPPort: pebbletest.FreePort(t)})
	tlsYAML := fmt.Sprintf(`  tls:
    mode: acme
    acme:
      domains: ["localhost"]
      directory: %q
      ca_root_file: %q
      storage: redis
`, peb.Directory, peb.CAFile)
	extra := fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: \"fleet:\"\n", rs.Addr)
	up := acmeUpstream(t)
	gws := make([]*acmeGateway, len(ports))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, p := range ports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := startACMEGateway(t, up, fmt.Sprintf("127.0.0.1:%d", p), tlsYAML, extra)
			mu.Lock()
			gws[i] = g
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, g := range gws {
		if g == nil {
			t.FailNow()
		}
	}
	for _, g := range gws {
		g.waitReady(t, 30*time.Second)
	}
	roots := peb.Roots(t)
	var serial string
	for i, g := range gws {
		leaf := g.served(t, roots)
		if i == 0 {
			serial = leaf.SerialNumber.String()
		} else if s := leaf.SerialNumber.String(); s != serial {
			t.Errorf("gateway %d serves serial %s, gateway 0 serves %s", i, s, serial)
		}
	}
	if n := peb.Orders(); n != 1 {
		t.Errorf("Pebble saw %d orders from the fleet, want 1", n)
	}
	keys, err := rs.Client(t).Keys(context.Background(), "fleet:certmagic/data/certificates/*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("no certificate under fleet:certmagic/ in Redis: %v %v", keys, err)
	}
}
