package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"github.com/faxgate/faxgate/internal/base/pemfile"
)

// demoOpsSPIFFE is the SPIFFE ID of the demo's client certificate: caller ops.
const demoOpsSPIFFE = "spiffe://faxgate.demo/ops"

// demoPKI is the throwaway PKI of faxgate demo --tls, as PEM files in one
// directory: a CA, the gateway's certificate for localhost and 127.0.0.1,
// and a client certificate naming caller ops by its SPIFFE ID. It lives as
// long as the demo and trusts nothing else.
type demoPKI struct {
	CA, Cert, Key, ClientCert, ClientKey string
}

func newDemoPKI(dir string) (*demoPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "faxgate demo CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &demoPKI{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "gateway.pem"), Key: filepath.Join(dir, "gateway-key.pem"),
		ClientCert: filepath.Join(dir, "ops.pem"), ClientKey: filepath.Join(dir, "ops-key.pem")}
	if err := pemfile.Write(p.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	spiffe, _ := url.Parse(demoOpsSPIFFE)
	for i, leaf := range []struct {
		cert, key string
		tmpl      x509.Certificate
	}{
		{p.Cert, p.Key, x509.Certificate{DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}},
		{p.ClientCert, p.ClientKey, x509.Certificate{URIs: []*url.URL{spiffe}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		t := leaf.tmpl
		t.SerialNumber, t.Subject = big.NewInt(int64(i+2)), pkix.Name{CommonName: "faxgate demo"}
		t.NotBefore, t.NotAfter, t.KeyUsage = now.Add(-time.Hour), now.Add(24*time.Hour), x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, &t, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := pemfile.Write(leaf.cert, "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if err := pemfile.Write(leaf.key, "EC PRIVATE KEY", kder); err != nil {
			return nil, err
		}
	}
	return p, nil
}
