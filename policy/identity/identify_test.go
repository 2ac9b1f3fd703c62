package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/config"
)

const (
	spiffeIntake  = "spiffe://example.org/ns/a/sa/intake"
	spiffeBilling = "spiffe://example.org/ns/a/sa/billing"
	spiffeOps     = "spiffe://example.org/ns/a/sa/ops"
)

func testCallers(unidentified string) config.Callers {
	return config.Callers{
		IdentityHeader: "x-faxgate-caller", // canonicalised by New
		TrustedProxies: []string{"10.0.0.1/32", "fd00::/64"},
		Unidentified:   unidentified,
		List: []config.Caller{
			{Name: "intake", CIDRs: []string{"10.20.0.0/16"}, SpiffeIDs: []string{spiffeIntake}, HeaderValues: []string{"intake"}},
			{Name: "billing", CIDRs: []string{"10.20.30.0/24", "2001:db8::/32"}, SpiffeIDs: []string{spiffeBilling}, HeaderValues: []string{"billing", "billing-v2"}},
			{Name: "ops", CIDRs: []string{"10.20.30.40/32", "::ffff:192.168.1.0/120"}, SpiffeIDs: []string{spiffeOps}, HeaderValues: []string{"ops"}},
			{Name: "guest"},
		},
	}
}

// idReq builds a request from peer with the given verified client
// certificate URIs (nil: no TLS) and header lines.
func idReq(peer string, certURIs []string, headers ...string) *http.Request {
	r := httptest.NewRequest("POST", "/v1/contacts/list", nil)
	r.RemoteAddr = peer
	if certURIs != nil {
		// What x509 parses from a certificate: the SAN extension as the
		// CA spelled it, and URIs after url.Parse.
		cert := &x509.Certificate{Extensions: []pkix.Extension{uriSANExtension(certURIs)}}
		for _, s := range certURIs {
			u, err := url.Parse(s)
			if err != nil {
				panic(err)
			}
			cert.URIs = append(cert.URIs, u)
		}
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

// uriSANExtension encodes uris, byte for byte, as a subjectAltName
// extension (x509.CreateCertificate would re-spell them through url.URL).
func uriSANExtension(uris []string) pkix.Extension {
	var names []asn1.RawValue
	for _, u := range uris {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(u)})
	}
	der, err := asn1.Marshal(names)
	if err != nil {
		panic(err)
	}
	return pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: der}
}

const (
	xfcc    = "X-Forwarded-Client-Cert"
	idHdr   = "X-Faxgate-Caller"
	trusted = "10.0.0.1:5555"
	outside = "192.0.2.9:5555"
)

func TestIdentify(t *testing.T) {
	unverified := idReq(outside, []string{spiffeIntake})
	unverified.TLS.VerifiedChains = nil
	for _, tc := range []struct {
		name         string
		unidentified string
		r            *http.Request
		want, how    string // want "" = refused
	}{
		// 1. mTLS
		{"mtls", "deny", idReq(outside, []string{spiffeIntake}), "intake", ByMTLS},
		// Exactly as configured: url.Parse would lowercase this scheme.
		{"mtls upper-case scheme", "deny", idReq(outside, []string{"SPIFFE://example.org/ns/a/sa/intake"}), "", ""},
		{"mtls prefix of an ID", "deny", idReq(outside, []string{"spiffe://example.org/ns/a/sa/intak"}), "", ""},
		{"mtls ID extended", "deny", idReq(outside, []string{spiffeIntake + "x"}), "", ""},
		{"mtls second URI", "deny", idReq(outside, []string{"spiffe://other/x", spiffeBilling}), "billing", ByMTLS},
		{"mtls same caller twice", "deny", idReq(outside, []string{spiffeBilling, spiffeBilling}), "billing", ByMTLS},
		{"mtls beats xfcc and header", "deny", idReq(trusted, []string{spiffeIntake}, xfcc, "URI="+spiffeOps, idHdr, "billing"), "intake", ByMTLS},
		{"mtls beats cidr", "deny", idReq("10.20.30.40:1", []string{spiffeIntake}), "intake", ByMTLS},
		{"mtls unknown URI falls to cidr", "deny", idReq("10.20.1.1:1", []string{"spiffe://example.org/ns/a/sa/x"}), "intake", ByCIDR},
		{"mtls two callers not believed", "deny", idReq(outside, []string{spiffeIntake, spiffeOps}), "", ""},
		{"mtls no URI", "deny", idReq(outside, []string{}), "", ""},
		{"unverified certificate ignored", "deny", unverified, "", ""},

		// 2. trusted proxy: XFCC, then identity header
		{"xfcc", "deny", idReq(trusted, nil, xfcc, "By=spiffe://gw;URI="+spiffeBilling), "billing", ByXFCC},
		{"xfcc last element wins", "deny", idReq(trusted, nil, xfcc, "URI="+spiffeBilling+",URI="+spiffeIntake), "intake", ByXFCC},
		{"xfcc forged first element ignored", "deny", idReq(trusted, nil, xfcc, "URI="+spiffeOps+",URI=spiffe://unknown"), "", ""},
		{"xfcc several lines, last line's element", "deny", idReq(trusted, nil, xfcc, "URI="+spiffeOps, xfcc, "URI="+spiffeIntake), "intake", ByXFCC},
		{"xfcc quoted values", "deny", idReq(trusted, nil, xfcc, `Subject="CN=a,URI=`+spiffeOps+`;x";URI="`+spiffeBilling+`"`), "billing", ByXFCC},
		{"xfcc escaped quotes", "deny", idReq(trusted, nil, xfcc, `Subject="CN=\"a\",b";URI=`+spiffeBilling), "billing", ByXFCC},
		{"xfcc URI inside quoted subject not believed", "deny", idReq(trusted, nil, xfcc, `Subject="x,URI=`+spiffeOps+`"`), "", ""},
		{"xfcc lower-case key", "deny", idReq(trusted, nil, xfcc, "uri="+spiffeBilling), "billing", ByXFCC},
		{"xfcc beats header", "deny", idReq(trusted, nil, xfcc, "URI="+spiffeBilling, idHdr, "ops"), "billing", ByXFCC},
		{"xfcc unknown URI falls to header", "deny", idReq(trusted, nil, xfcc, "URI=spiffe://x", idHdr, "ops"), "ops", ByHeader},
		{"xfcc malformed falls to header", "deny", idReq(trusted, nil, xfcc, `URI="`+spiffeBilling, idHdr, "ops"), "ops", ByHeader},
		{"xfcc duplicate URI falls to header", "deny", idReq(trusted, nil, xfcc, "URI="+spiffeBilling+";URI="+spiffeIntake, idHdr, "ops"), "ops", ByHeader},
		{"xfcc trailing comma falls through", "deny", idReq(trusted, nil, xfcc, "URI="+spiffeBilling+","), "", ""},
		{"xfcc from untrusted peer ignored", "deny", idReq(outside, nil, xfcc, "URI="+spiffeBilling), "", ""},
		{"xfcc from untrusted peer falls to cidr", "deny", idReq("10.20.1.1:1", nil, xfcc, "URI="+spiffeBilling), "intake", ByCIDR},
		{"header", "deny", idReq(trusted, nil, idHdr, "billing"), "billing", ByHeader},
		{"header second value", "deny", idReq(trusted, nil, idHdr, "billing-v2"), "billing", ByHeader},
		{"header OWS trimmed", "deny", idReq(trusted, nil, idHdr, " \tbilling\t "), "billing", ByHeader},
		{"header other case not believed", "deny", idReq(trusted, nil, idHdr, "Billing"), "", ""},
		{"header caller name is not a header value", "deny", idReq(trusted, nil, idHdr, "guest"), "", ""},
		{"header with NBSP not trimmed", "deny", idReq(trusted, nil, idHdr, "billing\u00a0"), "", ""},
		{"header with comma list", "deny", idReq(trusted, nil, idHdr, "ops, billing"), "", ""},
		{"header twice not believed", "deny", idReq(trusted, nil, idHdr, "billing", idHdr, "billing"), "", ""},
		{"header twice different not believed", "deny", idReq(trusted, nil, idHdr, "guest-x", idHdr, "ops"), "", ""},
		{"header empty", "deny", idReq(trusted, nil, idHdr, ""), "", ""},
		{"header underscore spelling ignored", "deny", idReq(trusted, nil, "X_Faxgate_Caller", "ops"), "", ""},
		{"header from untrusted peer ignored", "deny", idReq(outside, nil, idHdr, "ops"), "", ""},
		{"header from untrusted peer falls to cidr", "deny", idReq("10.20.30.41:1", nil, idHdr, "ops"), "billing", ByCIDR},
		{"header from untrusted peer falls to default", "guest", idReq(outside, nil, idHdr, "ops"), "guest", ByDefault},
		{"header from trusted IPv6 peer", "deny", idReq("[fd00::5]:443", nil, idHdr, "ops"), "ops", ByHeader},
		{"header from IPv4-mapped trusted peer", "deny", idReq("[::ffff:10.0.0.1]:443", nil, idHdr, "ops"), "ops", ByHeader},
		{"header from IPv6 peer outside trusted", "deny", idReq("[fd01::5]:443", nil, idHdr, "ops"), "", ""},
		{"header from neighbour of trusted", "deny", idReq("10.0.0.2:443", nil, idHdr, "ops"), "", ""},

		// 3. CIDRs, most specific first
		{"cidr /16", "deny", idReq("10.20.1.1:1", nil), "intake", ByCIDR},
		{"cidr /24 inside /16", "deny", idReq("10.20.30.41:1", nil), "billing", ByCIDR},
		{"cidr /32 inside /24", "deny", idReq("10.20.30.40:1", nil), "ops", ByCIDR},
		{"cidr IPv4-mapped peer", "deny", idReq("[::ffff:10.20.30.40]:1", nil), "ops", ByCIDR},
		{"cidr IPv6", "deny", idReq("[2001:db8::1]:1", nil), "billing", ByCIDR},
		{"cidr IPv6 with zone", "deny", idReq("[2001:db8::1%eth0]:1", nil), "billing", ByCIDR},
		{"cidr IPv4-mapped prefix", "deny", idReq("192.168.1.7:1", nil), "ops", ByCIDR},
		{"cidr trusted proxy itself", "deny", idReq(trusted, nil), "", ""},
		{"cidr miss", "deny", idReq("10.21.0.1:1", nil), "", ""},

		// 4. unidentified
		{"deny", "deny", idReq(outside, nil), "", ""},
		{"empty means deny", "", idReq(outside, nil), "", ""},
		{"default caller", "guest", idReq(outside, nil), "guest", ByDefault},
		{"unparsable peer deny", "deny", idReq("@", nil), "", ""},
		{"unparsable peer default", "guest", idReq("", nil, idHdr, "ops"), "guest", ByDefault},
		{"peer without port", "deny", idReq("10.20.1.1", nil), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := New(testCallers(tc.unidentified))
			if err != nil {
				t.Fatal(err)
			}
			name, how, ok := id.Identify(tc.r)
			if tc.want == "" {
				if ok {
					t.Fatalf("Identify = %q by %s, want refused", name, how)
				}
				if name != "" || how != "" {
					t.Errorf("refused Identify returned %q, %q", name, how)
				}
				return
			}
			if !ok || name != tc.want || how != tc.how {
				t.Errorf("Identify = %q, %q, %v; want %q, %q, true", name, how, ok, tc.want, tc.how)
			}
		})
	}
}

// TestIdentifyRealMTLS runs a real TLS server: a certificate verified by the
// client CA names the caller; with tls.RequestClientCert (no verification) the
// same certificate names no one.
func TestIdentifyRealMTLS(t *testing.T) {
	ca, caKey := newCA(t)
	client := newLeaf(t, ca, caKey, spiffeOps)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	id, err := New(testCallers("deny"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		auth tls.ClientAuthType
		want string
	}{
		{tls.RequireAndVerifyClientCert, "ops mtls true"},
		{tls.RequestClientCert, "  false"},
	} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name, how, ok := id.Identify(r)
			io.WriteString(w, name+" "+how+" "+map[bool]string{true: "true", false: "false"}[ok])
		}))
		srv.TLS = &tls.Config{ClientAuth: tc.auth, ClientCAs: pool}
		srv.StartTLS()
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = []tls.Certificate{client}
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err != nil {
			srv.Close()
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if string(body) != tc.want {
			t.Errorf("ClientAuth %v: Identify = %q, want %q", tc.auth, body, tc.want)
		}
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

func newLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, uri string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(uri)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		URIs:         []*url.URL{u},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func BenchmarkIdentify(b *testing.B) {
	id, err := New(testCallers("guest"))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		r    *http.Request
	}{
		{"cidr", idReq("10.20.30.41:1234", nil)},
		{"header", idReq(trusted, nil, idHdr, "billing")},
		{"xfcc", idReq(trusted, nil, xfcc, "By=spiffe://gw;Hash=abc;Subject=\"\";URI="+spiffeBilling)},
		{"mtls", idReq(outside, []string{spiffeIntake})},
		{"default", idReq(outside, nil)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				id.Identify(bc.r)
			}
		})
	}
}
