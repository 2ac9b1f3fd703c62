package servertls

// Mode acme: certmagic obtains and renews the certificate of
// server.tls.acme.domains from acme.directory.
//
// Start-up uses certmagic's ManageAsync, not ManageSync: ManageSync blocks
// until every certificate is obtained, and against an unreachable or
// refusing CA that is forever (certmagic retries for days). With
// ManageAsync, serve binds its listeners and answers the admin listener at
// once; /readyz stays 503 ("no TLS certificate for ...") until certmagic
// has the certificate, certmagic logs each failed attempt with its reason
// and retries with its backoff (1 min, 2 min, ... up to 30 days), and a
// load balancer sends no traffic meanwhile.
//
// Challenges: tls-alpn-01 is answered by the proxy listener itself. Its
// tls.Config offers "acme-tls/1", and a ClientHello asking for it gets a
// configuration without client authentication (the CA presents no client
// certificate, so client_auth require would fail every validation) whose
// certificate is certmagic's challenge certificate. certmagic's solver
// tries to bind the challenge port itself; it is pointed at the bound proxy
// port, finds it taken and leaves the answering to us (see Bound). http-01
// is answered on acme.http_listen by HTTPChallengeHandler. Challenge data is
// kept in the storage too (certmagic's distributed solving), so with
// storage redis any replica answers a challenge another replica started.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
)

// acmeTLS1 is the ALPN protocol of tls-alpn-01 validations (RFC 8737),
// spelled here rather than imported from acmez, which faxgate does not
// depend on directly.
const acmeTLS1 = "acme-tls/1"

// acmeState is what mode acme adds to a Server.
type acmeState struct {
	issuer  *certmagic.ACMEIssuer
	domains []string
}

// initACME builds certmagic for mode acme. Nothing is obtained until Run.
func (s *Server) initACME() error {
	a := s.o.TLS.ACME
	if len(a.Domains) == 0 { // validated by config; kept so a caller skipping it fails cleanly
		return fmt.Errorf("server.tls.acme.domains: required with server.tls.mode \"acme\"")
	}
	var roots *x509.CertPool
	if a.CARootFile != "" {
		b, err := os.ReadFile(a.CARootFile)
		if err != nil {
			return fmt.Errorf("server.tls.acme.ca_root_file: %s", pathless(err))
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return fmt.Errorf("server.tls.acme.ca_root_file: %q holds no PEM certificate", a.CARootFile)
		}
	}
	storage := s.o.Storage
	if storage == nil {
		if a.StoragePath != "" {
			storage = &certmagic.FileStorage{Path: a.StoragePath}
		} else {
			// $XDG_DATA_HOME/certmagic, else ~/.local/share/certmagic.
			storage = certmagic.Default.Storage
		}
	}
	cmLog := s.log.Named("certmagic")
	s.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return s.magic, nil },
		Logger:           cmLog,
	})
	s.magic = certmagic.New(s.cache, certmagic.Config{
		Storage: storage,
		// See New: no OCSP fetches from a gateway in a closed network.
		OCSP:   certmagic.OCSPConfig{DisableStapling: true},
		Logger: cmLog,
		// A client without SNI gets the first managed certificate rather
		// than a failed handshake.
		DefaultServerName: a.Domains[0],
		OnEvent:           s.acmeEvent,
	})
	// Present at 0 from the start, so that rate() and alerts see the first failure.
	for _, d := range a.Domains {
		for _, op := range []string{"obtain", "renew"} {
			s.o.Metrics.ACMEFailures.WithLabelValues(d, op)
		}
	}
	ca := a.Directory
	if ca == "" {
		ca = certmagic.LetsEncryptProductionCA
	}
	iss := certmagic.NewACMEIssuer(s.magic, certmagic.ACMEIssuer{
		CA:           ca,
		Email:        a.Email,
		Agreed:       true,
		TrustedRoots: roots,
		// http-01 only where a listener answers it.
		DisableHTTPChallenge: a.HTTPListen == "",
		Logger:               cmLog,
	})
	s.magic.Issuers = []certmagic.Issuer{iss}
	s.acme = &acmeState{issuer: iss, domains: slices.Clone(a.Domains)}
	return nil
}

// Bound tells mode acme where the listeners that answer challenges were
// bound: the proxy listener (tls-alpn-01) and, when set, the http-01
// listener (nil otherwise). certmagic's solvers try to bind these ports
// themselves before each challenge; finding them in use, they leave the
// answer to these listeners. Call it before Run; a no-op in mode files.
func (s *Server) Bound(proxy, http01 net.Addr) {
	if s.acme == nil {
		return
	}
	host, port := hostPort(proxy)
	s.acme.issuer.ListenHost = host
	s.acme.issuer.AltTLSALPNPort = port
	if http01 != nil {
		_, s.acme.issuer.AltHTTPPort = hostPort(http01)
	}
}

// hostPort splits a bound address; an unspecified host (":8080",
// "0.0.0.0") becomes "", which certmagic dials as the local host.
func hostPort(a net.Addr) (string, int) {
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return "", 0
	}
	port, _ := strconv.Atoi(p)
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		h = ""
	}
	return h, port
}

// HTTPChallengeHandler answers http-01 challenges (from this replica or,
// through the storage, any other) and gives everything else 404. nil in
// mode files.
func (s *Server) HTTPChallengeHandler() http.Handler {
	if s.acme == nil {
		return nil
	}
	return s.acme.issuer.HTTPChallengeHandler(http.NotFoundHandler())
}

// acmeChallengeConfig answers tls-alpn-01 validations: a ClientHello
// offering only "acme-tls/1" gets a configuration without client
// authentication that negotiates that protocol alone (certmagic's
// GetCertificate serves the challenge certificate for it). Every other
// hello gets base unchanged.
func acmeChallengeConfig(base *tls.Config) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	challenge := base.Clone()
	challenge.ClientAuth = tls.NoClientCert
	challenge.ClientCAs = nil
	challenge.NextProtos = []string{acmeTLS1}
	challenge.GetConfigForClient = nil
	return func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		// RFC 8737 section 3: the validation offers acme-tls/1 as its
		// only protocol.
		if len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmeTLS1 {
			return challenge, nil
		}
		return nil, nil
	}
}

// runACME starts certmagic's management of the domains and keeps the
// expiry metric in step with the certificate served until ctx ends.
func (s *Server) runACME(ctx context.Context) {
	// ManageAsync returns once the domains are registered; obtaining (or
	// loading from the storage) and renewing run in certmagic's
	// goroutines, which end with ctx.
	if err := s.magic.ManageAsync(ctx, s.acme.domains); err != nil {
		s.log.Error("ACME certificate management did not start", zap.Strings("domains", s.acme.domains),
			zap.String("reason", err.Error()))
	}
	background.Loop(ctx, s.log, s.o.Panics, "tls_acme_metrics", s.sleep, func(ctx context.Context) {
		s.updateACMEMetrics()
		for s.sleep(ctx) {
			s.updateACMEMetrics()
		}
	})
}

// acmeEvent counts certmagic's failed obtains and renewals (it logs them
// itself, with the reason). The domain label is only ever a configured
// domain: certmagic manages nothing else here.
func (s *Server) acmeEvent(_ context.Context, event string, data map[string]any) error {
	if event != "cert_failed" {
		return nil
	}
	name, _ := data["identifier"].(string)
	if !slices.Contains(s.acme.domains, name) {
		return nil
	}
	op := "obtain"
	if renewal, _ := data["renewal"].(bool); renewal {
		op = "renew"
	}
	s.o.Metrics.ACMEFailures.WithLabelValues(name, op).Inc()
	return nil
}

// managedLeaf is the newest certificate certmagic holds for domain, or nil.
func (s *Server) managedLeaf(domain string) *x509.Certificate {
	var leaf *x509.Certificate
	for _, c := range s.cache.AllMatchingCertificates(domain) {
		if c.Leaf != nil && (leaf == nil || c.Leaf.NotAfter.After(leaf.NotAfter)) {
			leaf = c.Leaf
		}
	}
	return leaf
}

// updateACMEMetrics sets faxgate_tls_certificate_expiry_timestamp_seconds
// for each domain that has a certificate.
func (s *Server) updateACMEMetrics() {
	for _, d := range s.acme.domains {
		if leaf := s.managedLeaf(d); leaf != nil {
			s.o.Metrics.CertExpiry.WithLabelValues(d).Set(float64(leaf.NotAfter.Unix()))
		}
	}
}

// acmeReady is ready when every domain has a certificate that has not
// expired; it also refreshes the expiry metric, so /readyz and /metrics
// agree.
func (s *Server) acmeReady() (bool, string) {
	var missing, expired []string
	now := s.o.Clock.Now()
	for _, d := range s.acme.domains {
		leaf := s.managedLeaf(d)
		switch {
		case leaf == nil:
			missing = append(missing, d)
		case !now.Before(leaf.NotAfter):
			expired = append(expired, d+" at "+leaf.NotAfter.UTC().Format(time.RFC3339))
		default:
			s.o.Metrics.CertExpiry.WithLabelValues(d).Set(float64(leaf.NotAfter.Unix()))
		}
	}
	switch {
	case len(missing) > 0:
		return false, "no TLS certificate yet for " + strings.Join(missing, ", ") + " (ACME; see the certmagic log lines)"
	case len(expired) > 0:
		return false, "the TLS certificate expired for " + strings.Join(expired, ", ")
	}
	return true, ""
}
