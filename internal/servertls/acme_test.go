package servertls

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

func acmeOptions(t *testing.T) Options {
	t.Helper()
	clients := tlstest.NewCA(t, "client CA")
	ca := filepath.Join(t.TempDir(), "clients.pem")
	tlstest.WriteFile(t, ca, clients.CertPEM)
	return Options{
		TLS: config.TLS{Mode: "acme", MinVersion: "1.2", ClientCAFile: ca, ClientAuth: "require",
			ACME: config.ACME{Domains: []string{"gw.faxgate.test"}, Directory: "https://127.0.0.1:1/dir",
				Storage: "file", StoragePath: t.TempDir()}},
		Metrics: NewMetrics(prometheus.NewRegistry()),
	}
}

// TestACMEChallengeHandshakesSkipClientAuth: the listener offers
// acme-tls/1, and a hello offering only acme-tls/1 (a tls-alpn-01
// validation) gets a configuration without client authentication, even
// with client_auth require; every other hello keeps the listener's own.
func TestACMEChallengeHandshakesSkipClientAuth(t *testing.T) {
	s, err := New(acmeOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.TLSConfig()
	if got := strings.Join(c.NextProtos, ","); got != "h2,http/1.1,acme-tls/1" {
		t.Errorf("NextProtos = %s", got)
	}
	if c.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("ClientAuth = %v with client_auth require", c.ClientAuth)
	}
	ch, err := c.GetConfigForClient(&tls.ClientHelloInfo{ServerName: "gw.faxgate.test", SupportedProtos: []string{"acme-tls/1"}})
	if err != nil || ch == nil {
		t.Fatalf("acme-tls/1 hello: %v, %v", ch, err)
	}
	if ch.ClientAuth != tls.NoClientCert || strings.Join(ch.NextProtos, ",") != "acme-tls/1" || ch.GetCertificate == nil {
		t.Errorf("acme-tls/1 config: auth %v, protos %v", ch.ClientAuth, ch.NextProtos)
	}
	for _, protos := range [][]string{nil, {"h2", "http/1.1"}, {"h2", "acme-tls/1"}} {
		if ch, _ := c.GetConfigForClient(&tls.ClientHelloInfo{SupportedProtos: protos}); ch != nil {
			t.Errorf("hello offering %v got another configuration", protos)
		}
	}
	if ok, why := s.Ready(); ok || !strings.Contains(why, "no TLS certificate yet for gw.faxgate.test") {
		t.Errorf("Ready() = %v, %q before any certificate", ok, why)
	}
}

// TestFilesModeOffersNoACME: mode files neither offers acme-tls/1 nor
// relaxes client authentication for anyone.
func TestFilesModeOffersNoACME(t *testing.T) {
	ca := tlstest.NewCA(t, "server CA")
	cert, key := ca.Server(t, "faxgate.test").WriteFiles(t, t.TempDir())
	o := acmeOptions(t)
	o.TLS.Mode, o.TLS.CertFile, o.TLS.KeyFile, o.TLS.ACME = "files", cert, key, config.ACME{Storage: "file"}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.TLSConfig()
	if c.GetConfigForClient != nil || strings.Join(c.NextProtos, ",") != "h2,http/1.1" {
		t.Errorf("files mode: NextProtos %v, GetConfigForClient set %v", c.NextProtos, c.GetConfigForClient != nil)
	}
}
