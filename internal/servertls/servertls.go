// Package servertls is the TLS of the proxy listener (docs/tls.md):
// the certificate, served through certmagic, the client certificate
// verification of mTLS, and the TLS versions and protocols offered.
//
// Mode files caches the pair from server.tls.cert_file/key_file in
// certmagic as an unmanaged certificate and polls both files on the
// injected clock: certmagic does not watch files, and Kubernetes delivers
// Secret updates (cert-manager renewals) as symlink swaps that keep old
// timestamps, so the content is hashed (internal/base/filedigest). A new pair is
// swapped in whole; a broken one keeps the certificate in use and is logged.
// No key or certificate body is ever logged: problems name files and
// reasons only.
package servertls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/filedigest"
	"github.com/faxgate/faxgate/internal/config"
)

// DefaultPollEvery is how often the certificate files are checked for a change.
const DefaultPollEvery = 5 * time.Second

// Options configure New.
type Options struct {
	// TLS is server.tls, already validated; Mode must be "files".
	TLS config.TLS
	// Clock drives the file polling and the expiry checks. Default
	// clock.Real{}.
	Clock clock.Clock
	// PollEvery is how often the files are checked. Default DefaultPollEvery.
	PollEvery time.Duration
	// Logger receives the reloads and the rejected pairs. Default: none.
	Logger *zap.Logger
	// Metrics receive the certificate expiry and the handshake errors. Required.
	Metrics *Metrics
	// Panics counts the panics recovered in the certificate watch and the ACME metrics loop
	// (faxgate_background_panics_total); nil counts nothing.
	Panics background.Counter
	// Storage is where mode acme keeps accounts, certificates, keys and
	// locks: certstore over Redis for acme.storage redis. nil means files
	// under acme.storage_path (certmagic's default directory when empty).
	// Unused in mode files.
	Storage certmagic.Storage
}

// Server holds the proxy listener's certificate and TLS settings.
type Server struct {
	o         Options
	log       *zap.Logger
	cache     *certmagic.Cache
	magic     *certmagic.Config
	clientCAs *x509.CertPool
	acme      *acmeState // mode acme only

	// mu guards what follows: the poller writes it, readiness reads it.
	mu       sync.Mutex
	hash     string // certmagic cache key of the certificate served; "" = none
	domain   string // its expiry metric label
	notAfter time.Time
	seen     [2]filedigest.Digest // the cert and key files at the last attempt
	logged   string               // the last rejection logged, so a broken pair is logged once
}

// New loads the certificate (and the client CA file, when set) and returns
// a Server ready to hand out its tls.Config. An error names the setting at
// fault by its YAML path and never holds file content. Close releases it.
func New(o Options) (*Server, error) {
	if o.TLS.Mode != "files" && o.TLS.Mode != "acme" {
		return nil, fmt.Errorf("server.tls.mode: %q has no certificate source here", o.TLS.Mode)
	}
	if o.Metrics == nil {
		return nil, errors.New("servertls: Options.Metrics is required")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.PollEvery <= 0 {
		o.PollEvery = DefaultPollEvery
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	s := &Server{o: o, log: o.Logger}
	for _, r := range HandshakeReasons {
		o.Metrics.HandshakeErrors.WithLabelValues(r) // present at 0 for rate() and alerts
	}
	if f := o.TLS.ClientCAFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("server.tls.client_ca_file: %w", err)
		}
		s.clientCAs = x509.NewCertPool()
		if !s.clientCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("server.tls.client_ca_file: %q holds no PEM certificate", f)
		}
	}

	if o.TLS.Mode == "acme" {
		if err := s.initACME(); err != nil {
			return nil, err
		}
		return s, nil
	}
	cmLog := o.Logger.Named("certmagic")
	s.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return s.magic, nil },
		Logger:           cmLog,
	})
	s.magic = certmagic.New(s.cache, certmagic.Config{
		// In memory: nothing is written under $HOME (see memStorage).
		Storage: newMemStorage(),
		// Stapling would fetch from the CA's OCSP responder at every load
		// and in the background; a gateway in a closed network must not
		// stall or log on that.
		OCSP: certmagic.OCSPConfig{DisableStapling: true},
		// No issuer: these certificates are never obtained or renewed here.
		Issuers:       []certmagic.Issuer{},
		CertSelection: theCertificate{},
		// A client without SNI (one dialing an IP address) is looked up
		// under this name, which matches nothing, so CertSelection gets
		// the one certificate.
		DefaultServerName: "default.faxgate.invalid",
		Logger:            cmLog,
	})
	if err := s.reload(context.Background()); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close stops certmagic's maintenance goroutine.
func (s *Server) Close() { s.cache.Stop() }

// TLSConfig is the listener's configuration: the certificate from
// certmagic, ALPN h2 and http/1.1, server.tls.min_version and, with a
// client CA, client certificate verification (optional or require).
func (s *Server) TLSConfig() *tls.Config {
	c := &tls.Config{
		GetCertificate: s.magic.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
		MinVersion:     tls.VersionTLS12,
	}
	if s.o.TLS.MinVersion == "1.3" {
		c.MinVersion = tls.VersionTLS13
	}
	if s.acme != nil {
		c.NextProtos = append(c.NextProtos, acmeTLS1)
	}
	if s.clientCAs != nil {
		c.ClientCAs = s.clientCAs
		// client_auth: optional lets a client present no certificate (it
		// is then identified by trusted header or source address), but a
		// certificate it does present must verify: one from another CA,
		// expired, not yet valid or not issued for client auth fails the
		// handshake (faxgate_tls_handshake_errors_total{reason=
		// "bad_client_cert"}), over HTTP/1.1 and h2 alike. It is never
		// set aside in favour of the next identity: a caller whose
		// certificate expired, or an attacker holding a foreign one, would
		// then be served silently as whoever its address names (or refused
		// as unidentified without a word about the certificate), and an
		// expired certificate would go unnoticed until the address changed.
		// Envoy without require_client_certificate also fails such a
		// handshake; nginx's ssl_verify_client optional answers it with 400
		// (docs/tls.md).
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if s.o.TLS.ClientAuth == "require" {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	if s.acme != nil {
		c.GetConfigForClient = acmeChallengeConfig(c)
	}
	return c
}

// Ready reports whether a certificate that has not expired is in hand
// (/readyz waits for one; docs/tls.md), and why not.
func (s *Server) Ready() (bool, string) {
	if s.acme != nil {
		return s.acmeReady()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.hash == "":
		return false, "no TLS certificate loaded"
	case !s.o.Clock.Now().Before(s.notAfter):
		return false, "the TLS certificate expired at " + s.notAfter.UTC().Format(time.RFC3339)
	}
	return true, ""
}

// Run polls the certificate files until ctx ends and swaps in each new
// valid pair. A panic is logged and the polling resumes one interval later.
func (s *Server) Run(ctx context.Context) {
	if s.acme != nil {
		s.runACME(ctx)
		return
	}
	background.Loop(ctx, s.log, s.o.Panics, "tls_cert_watch", s.sleep, func(ctx context.Context) {
		for s.sleep(ctx) {
			s.poll(ctx)
		}
	})
}

func (s *Server) sleep(ctx context.Context) bool {
	t := s.o.Clock.NewTimer(s.o.PollEvery)
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-t.C():
		return true
	}
}

// poll reloads when either file's content differs from the last attempt
// (or a file could not be read: it may be mid-swap). A pair that failed is
// not retried until a file changes again, and the same reason is logged
// once, not at every poll.
func (s *Server) poll(ctx context.Context) {
	cd, cerr := filedigest.Of(s.o.TLS.CertFile)
	kd, kerr := filedigest.Of(s.o.TLS.KeyFile)
	s.mu.Lock()
	same := s.seen == [2]filedigest.Digest{cd, kd}
	s.mu.Unlock()
	if same && cerr == nil && kerr == nil {
		return
	}
	err := s.reload(ctx)
	s.mu.Lock()
	again := err != nil && err.Error() == s.logged
	if err != nil {
		s.logged = err.Error()
	} else {
		s.logged = ""
	}
	s.mu.Unlock()
	if err != nil && !again {
		s.log.Warn("TLS certificate files not loaded; keeping the certificate in use",
			zap.String("cert_file", s.o.TLS.CertFile), zap.String("key_file", s.o.TLS.KeyFile),
			zap.String("reason", err.Error()))
	}
}

// reload reads both files and, when they form a valid, unexpired pair,
// makes it the certificate served. The files' digests are remembered
// either way.
func (s *Server) reload(ctx context.Context) error {
	t := s.o.TLS
	certPEM, err := os.ReadFile(t.CertFile)
	if err != nil {
		return fmt.Errorf("server.tls.cert_file: %s", pathless(err))
	}
	keyPEM, err := os.ReadFile(t.KeyFile)
	if err != nil {
		return fmt.Errorf("server.tls.key_file: %s", pathless(err))
	}
	s.mu.Lock()
	s.seen = [2]filedigest.Digest(digests(certPEM, keyPEM))
	s.mu.Unlock()

	// Checked here as well as in certmagic, for the expiry, and so the
	// reason is crypto/tls's, which names no key material.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("server.tls.cert_file: %q and %q are not a certificate and key pair: %s", t.CertFile, t.KeyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return fmt.Errorf("server.tls.cert_file: %q: %s", t.CertFile, err)
		}
	}
	if !s.o.Clock.Now().Before(leaf.NotAfter) {
		return fmt.Errorf("server.tls.cert_file: %q expired at %s", t.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	hash, err := s.magic.CacheUnmanagedCertificatePEMBytes(ctx, certPEM, keyPEM, nil)
	if err != nil {
		return fmt.Errorf("server.tls.cert_file: %q: %s", t.CertFile, err)
	}

	s.mu.Lock()
	old, oldDomain := s.hash, s.domain
	s.hash, s.domain, s.notAfter = hash, domainOf(leaf), leaf.NotAfter
	domain := s.domain
	s.mu.Unlock()
	// The new certificate is cached before the old one goes, so no
	// handshake in between finds none.
	if old != "" && old != hash {
		s.cache.Remove([]string{old})
	}
	if oldDomain != "" && oldDomain != domain {
		s.o.Metrics.CertExpiry.DeleteLabelValues(oldDomain)
	}
	s.o.Metrics.CertExpiry.WithLabelValues(domain).Set(float64(leaf.NotAfter.Unix()))
	if old != hash {
		s.log.Info("TLS certificate loaded", zap.String("domain", domain),
			zap.Time("not_after", leaf.NotAfter), zap.Bool("replaced", old != ""))
	}
	return nil
}

// domainOf is the label of a certificate's expiry metric: its first DNS
// name. A certificate without one (IP addresses only) is "unnamed": an IP
// address is never a label value (docs/metrics-and-alerts.md).
func domainOf(leaf *x509.Certificate) string {
	if len(leaf.DNSNames) > 0 {
		return leaf.DNSNames[0]
	}
	return "unnamed"
}

// pathless is an os error's reason without the path it carries (the
// message names the YAML path and the file already).
func pathless(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("cannot read %q: %s", pe.Path, pe.Err)
	}
	return err.Error()
}

// theCertificate serves the certificate of mode files whatever name the
// client asks for (or none, as when it dials an IP address): there is one,
// and whether it fits the name is for the client to judge. certmagic calls
// it with every cached certificate when none matches the name.
type theCertificate struct{}

func (theCertificate) SelectCertificate(_ *tls.ClientHelloInfo, choices []certmagic.Certificate) (certmagic.Certificate, error) {
	if len(choices) == 0 {
		return certmagic.Certificate{}, errors.New("no TLS certificate loaded")
	}
	return choices[0], nil
}
