package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/pemfile"
)

// TLSFiles are a throwaway CA and a server certificate it signed, as PEM
// files in a test's temporary directory.
type TLSFiles struct {
	// CAFile holds the CA certificate: the trust root a client needs.
	CAFile string
	// CertFile and KeyFile are the server's certificate and private key.
	CertFile, KeyFile string
	// Pool holds the CA certificate.
	Pool *x509.CertPool
	// Hosts are the names and addresses the server certificate is valid for.
	Hosts []string
}

// NewTLSFiles generates a CA and a server certificate valid for an hour for
// hosts (IP addresses or DNS names), by default 127.0.0.1 and localhost.
// Each call makes a new CA, so two calls give two CAs that do not trust
// each other's certificates (the "wrong CA" of a test).
func NewTLSFiles(t testing.TB, hosts ...string) TLSFiles {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	dir := t.TempDir()
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	srvKey := newKey(t)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redistest server"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, ip)
		} else {
			srvTmpl.DNSNames = append(srvTmpl.DNSNames, h)
		}
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	f := TLSFiles{
		CAFile:   writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER),
		CertFile: writePEM(t, dir, "server.pem", "CERTIFICATE", srvDER),
		KeyFile:  writePEM(t, dir, "server-key.pem", "PRIVATE KEY", keyDER),
		Pool:     x509.NewCertPool(),
		Hosts:    hosts,
	}
	f.Pool.AddCert(ca)
	return f
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return k
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := pemfile.Write(p, typ, der); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return p
}

// StartTLS starts redis-server speaking only TLS (the plain port is 0) on a
// free loopback port with the certificate of f, not asking clients for
// certificates. Client and the readiness probe speak TLS to it, trusting f's
// CA under the certificate's first host name. args are extra redis-server
// options.
func StartTLS(t testing.TB, f TLSFiles, args ...string) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	s := start(t, bin, "redis-tls", func(port int, dir string) string {
		// port 0 turns the plain listener off: a client that forgets TLS
		// must fail, not fall back.
		conf := strings.Replace(baseConf(port, dir), fmt.Sprintf("port %d\n", port), "port 0\n", 1)
		return conf + fmt.Sprintf("tls-port %d\ntls-cert-file %q\ntls-key-file %q\ntls-ca-cert-file %q\ntls-auth-clients no\n",
			port, f.CertFile, f.KeyFile, f.CAFile)
	}, args, &tls.Config{RootCAs: f.Pool, ServerName: f.Hosts[0], MinVersion: tls.VersionTLS12})
	return s
}

// pingTLS is ping over TLS, with the certificate verified.
func pingTLS(addr string, cfg *tls.Config) bool {
	d := &net.Dialer{Timeout: 200 * time.Millisecond}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return false
	}
	return pingOn(c)
}
