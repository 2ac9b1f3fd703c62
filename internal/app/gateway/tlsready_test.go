package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

// TestReadyzSaysTheCertificateExpired: /readyz tells the truth about the
// certificate: once the one in hand expires (no renewal arrived), the
// gateway is not ready, whatever its token, and says why.
func TestReadyzSaysTheCertificateExpired(t *testing.T) {
	ca := tlstest.NewCA(t, "ready CA")
	pair := ca.Issue(t, tlstest.Leaf{DNSNames: []string{"faxgate.test"}, NotAfter: time.Now().Add(time.Hour)})
	cert, key := pair.WriteFiles(t, t.TempDir())
	yaml := strings.Replace(testConfigYAML("http://127.0.0.1:1", `"contacts.*"`), "server:\n",
		"server:\n  tls:\n    mode: files\n    cert_file: "+cert+"\n    key_file: "+key+"\n", 1)
	cfg, err := config.Parse([]byte(yaml), testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Now())
	g, err := New(cfg, Deps{Registry: prometheus.NewRegistry(), Getenv: testGetenv, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, why := g.ready(); strings.Contains(why, "TLS") {
		t.Fatalf("ready() blames the certificate in hand: %q", why)
	}
	clock.Advance(2 * time.Hour)
	if ok, why := g.ready(); ok || !strings.Contains(why, "TLS certificate expired") {
		t.Fatalf("ready() = %v, %q after the certificate expired", ok, why)
	}
}
