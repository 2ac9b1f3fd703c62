package servertls_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/servertls"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

const poll = time.Second

type fixture struct {
	t        *testing.T
	srv      *servertls.Server
	clock    *clocktest.Fake
	logs     *observer.ObservedLogs
	met      *servertls.Metrics
	dir      string
	cert     string
	key      string
	pemsSeen []string // every PEM body written: none may reach a log line
}

// start writes p as the certificate files and starts a Server polling them
// on a fake clock.
func start(t *testing.T, p tlstest.Pair) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), met: servertls.NewMetrics(prometheus.NewRegistry())}
	// The layout of a mounted Secret: cert.pem -> ..data/cert.pem, and
	// ..data -> the current data directory.
	f.cert, f.key = filepath.Join(f.dir, "cert.pem"), filepath.Join(f.dir, "key.pem")
	f.swap(p.CertPEM, p.KeyPEM)
	for _, name := range []string{"cert.pem", "key.pem"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(f.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	f.clock = clocktest.New(time.Now())
	core, logs := observer.New(zapcore.DebugLevel)
	f.logs = logs
	srv, err := servertls.New(servertls.Options{
		TLS:   config.TLS{Mode: "files", MinVersion: "1.2", CertFile: f.cert, KeyFile: f.key, ClientAuth: "optional"},
		Clock: f.clock, PollEvery: poll, Logger: zap.New(core), Metrics: f.met,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close(); f.checkNoPEMLogged() })
	return f
}

func (f *fixture) remember(p tlstest.Pair) {
	for _, b := range [][]byte{p.CertPEM, p.KeyPEM} {
		for _, line := range strings.Split(string(b), "\n") {
			if len(line) > 20 && !strings.HasPrefix(line, "-----") {
				f.pemsSeen = append(f.pemsSeen, line)
			}
		}
	}
}

// tick lets one poll happen: the loop is asleep, the clock passes the
// interval, and the loop is asleep again (the poll is done).
func (f *fixture) tick() {
	f.t.Helper()
	if !f.clock.WaitPending(1, 5*time.Second) {
		f.t.Fatal("the poller never slept")
	}
	f.clock.Advance(poll)
	if !f.clock.WaitPending(1, 5*time.Second) {
		f.t.Fatal("the poller never came back")
	}
}

// served is the first DNS name of the certificate a handshake gets, with
// and without a server name.
func (f *fixture) served() string {
	f.t.Helper()
	var names []string
	for _, sni := range []string{"", "localhost", "other.example"} {
		c, err := f.srv.TLSConfig().GetCertificate(&tls.ClientHelloInfo{ServerName: sni})
		if err != nil {
			f.t.Fatalf("GetCertificate(%q): %v", sni, err)
		}
		names = append(names, c.Leaf.DNSNames[0])
	}
	if names[0] != names[1] || names[1] != names[2] {
		f.t.Fatalf("different certificates for different names: %v", names)
	}
	return names[0]
}

func (f *fixture) expiry(domain string) float64 {
	return testutil.ToFloat64(f.met.CertExpiry.WithLabelValues(domain))
}

// rejections returns, and forgets, the log lines of rejected pairs; every
// line taken is checked for PEM first.
func (f *fixture) rejections() []observer.LoggedEntry {
	f.checkNoPEMLogged()
	var out []observer.LoggedEntry
	for _, e := range f.logs.TakeAll() {
		if e.Message == "TLS certificate files not loaded; keeping the certificate in use" {
			out = append(out, e)
		}
	}
	return out
}

func (f *fixture) checkNoPEMLogged() {
	for _, e := range f.logs.All() {
		line := e.Message
		for _, fld := range e.Context {
			line += " " + fld.String + " " + fld.Key
		}
		if strings.Contains(line, "-----BEGIN") {
			f.t.Errorf("a log line holds PEM: %q", line)
		}
		for _, s := range f.pemsSeen {
			if strings.Contains(line, s) {
				f.t.Errorf("a log line holds a certificate or key body: %q", line)
			}
		}
	}
}

// swap replaces the files the way Kubernetes updates a mounted Secret: a
// new directory, then one rename of a symlink.
func (f *fixture) swap(certPEM, keyPEM []byte) {
	f.t.Helper()
	f.remember(tlstest.Pair{CertPEM: certPEM, KeyPEM: keyPEM})
	data := filepath.Join(f.dir, "data-"+time.Now().Format("150405.000000000"))
	if err := os.Mkdir(data, 0o700); err != nil {
		f.t.Fatal(err)
	}
	tlstest.WriteFile(f.t, filepath.Join(data, "cert.pem"), certPEM)
	tlstest.WriteFile(f.t, filepath.Join(data, "key.pem"), keyPEM)
	link := filepath.Join(f.dir, "..data")
	tmp := link + ".tmp"
	if err := os.Symlink(filepath.Base(data), tmp); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		f.t.Fatal(err)
	}
}

func TestFilesServeAndRotate(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	a := ca.Server(t, "a.faxgate.test")
	f := start(t, a)
	if got := f.served(); got != "a.faxgate.test" {
		t.Fatalf("served %s, want a.faxgate.test", got)
	}
	if ok, why := f.srv.Ready(); !ok {
		t.Fatalf("not ready with a certificate: %s", why)
	}
	if got, want := f.expiry("a.faxgate.test"), float64(a.Leaf.NotAfter.Unix()); got != want {
		t.Errorf("expiry metric %v, want %v", got, want)
	}

	// A renewal arrives as a symlink swap: both files change at once.
	b := ca.Server(t, "b.faxgate.test")
	f.swap(b.CertPEM, b.KeyPEM)
	f.tick()
	if got := f.served(); got != "b.faxgate.test" {
		t.Fatalf("after the swap served %s, want b.faxgate.test", got)
	}
	if n := testutil.CollectAndCount(f.met.CertExpiry); n != 1 {
		t.Errorf("%d expiry series after the swap, want 1 (the old domain's removed)", n)
	}
	if got, want := f.expiry("b.faxgate.test"), float64(b.Leaf.NotAfter.Unix()); got != want {
		t.Errorf("expiry metric %v, want %v", got, want)
	}

	// Written in place one file at a time: the first poll may see a
	// mismatched pair; the next one loads it.
	c := ca.Server(t, "c.faxgate.test")
	f.remember(c)
	tlstest.WriteFile(t, filepath.Join(f.dir, "..data", "cert.pem"), c.CertPEM)
	f.tick()
	if got := f.served(); got != "b.faxgate.test" {
		t.Fatalf("half-written pair: served %s, want b.faxgate.test kept", got)
	}
	tlstest.WriteFile(t, filepath.Join(f.dir, "..data", "key.pem"), c.KeyPEM)
	f.tick()
	if got := f.served(); got != "c.faxgate.test" {
		t.Fatalf("after the key arrived: served %s, want c.faxgate.test", got)
	}
}

func TestFilesBrokenPairKeepsTheOld(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	a := ca.Server(t, "a.faxgate.test")
	f := start(t, a)
	other := ca.Server(t, "other.faxgate.test")
	expired := ca.Issue(t, tlstest.Leaf{DNSNames: []string{"old.faxgate.test"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, tc := range []struct {
		name      string
		cert, key []byte
		reason    string
	}{
		{"key of another certificate", a.CertPEM, other.KeyPEM, "private key does not match public key"},
		{"not PEM", []byte("garbage"), a.KeyPEM, "failed to find any PEM data in certificate input"},
		{"empty key", a.CertPEM, nil, "failed to find any PEM data in key input"},
		{"expired", expired.CertPEM, expired.KeyPEM, "expired at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := f.t
			f.t = t
			defer func() { f.t = parent }()
			f.swap(tc.cert, tc.key)
			f.tick()
			if got := f.served(); got != "a.faxgate.test" {
				t.Fatalf("served %s, want the old a.faxgate.test", got)
			}
			if ok, why := f.srv.Ready(); !ok {
				t.Errorf("not ready with the old certificate in hand: %s", why)
			}
			lines := f.rejections()
			if len(lines) != 1 {
				t.Fatalf("%d log lines for the broken pair, want 1", len(lines))
			}
			if r := lines[0].ContextMap()["reason"].(string); !strings.Contains(r, tc.reason) {
				t.Errorf("reason %q, want it to say %q", r, tc.reason)
			}
			// The same broken files are not retried, nor logged again.
			f.tick()
			if n := len(f.rejections()); n != 0 {
				t.Errorf("the unchanged broken pair was logged again")
			}
		})
	}
	// A missing file (mid-swap, or a deleted Secret) keeps it too.
	if err := os.Remove(filepath.Join(f.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	f.tick()
	if got := f.served(); got != "a.faxgate.test" {
		t.Fatalf("files gone: served %s, want the old a.faxgate.test", got)
	}
}

func TestFilesReadiness(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	a := ca.Issue(t, tlstest.Leaf{DNSNames: []string{"a.faxgate.test"}, NotAfter: time.Now().Add(time.Hour)})
	f := start(t, a)
	if ok, why := f.srv.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	// The certificate runs out and no renewal came: not ready, saying why.
	f.clock.Advance(2 * time.Hour)
	if ok, why := f.srv.Ready(); ok || !strings.Contains(why, "expired") {
		t.Fatalf("Ready() = %v, %q after expiry, want false and why", ok, why)
	}
	b := ca.Server(t, "a.faxgate.test")
	f.swap(b.CertPEM, b.KeyPEM)
	f.tick()
	if ok, why := f.srv.Ready(); !ok {
		t.Fatalf("not ready after the renewal: %s", why)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	good := ca.Server(t, "a.faxgate.test")
	cert, key := good.WriteFiles(t, dir)
	other := ca.Server(t)
	otherKey := filepath.Join(dir, "other.key")
	tlstest.WriteFile(t, otherKey, other.KeyPEM)
	notCA := filepath.Join(dir, "not-ca.pem")
	tlstest.WriteFile(t, notCA, good.KeyPEM)
	expired := ca.Issue(t, tlstest.Leaf{DNSNames: []string{"x"}, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	expDir := t.TempDir()
	expCert, expKey := expired.WriteFiles(t, expDir)
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		tls  config.TLS
		want string
	}{
		{"missing cert", config.TLS{CertFile: missing, KeyFile: key}, "server.tls.cert_file: cannot read"},
		{"missing key", config.TLS{CertFile: cert, KeyFile: missing}, "server.tls.key_file: cannot read"},
		{"mismatched key", config.TLS{CertFile: cert, KeyFile: otherKey}, "private key does not match public key"},
		{"expired", config.TLS{CertFile: expCert, KeyFile: expKey}, "expired at"},
		{"CA file without certificates", config.TLS{CertFile: cert, KeyFile: key, ClientCAFile: notCA}, "server.tls.client_ca_file:"},
		{"missing CA file", config.TLS{CertFile: cert, KeyFile: key, ClientCAFile: missing}, "server.tls.client_ca_file:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.tls.Mode, tc.tls.MinVersion = "files", "1.2"
			_, err := servertls.New(servertls.Options{TLS: tc.tls, Metrics: servertls.NewMetrics(prometheus.NewRegistry())})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error saying %q", err, tc.want)
			}
			if msg := err.Error(); strings.Contains(msg, "BEGIN") || strings.Contains(msg, "\n") {
				t.Errorf("error is not one line without PEM: %q", msg)
			}
		})
	}
}

func TestTLSConfig(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	f := start(t, ca.Server(t))
	c := f.srv.TLSConfig()
	if c.MinVersion != tls.VersionTLS12 || strings.Join(c.NextProtos, ",") != "h2,http/1.1" || c.ClientAuth != tls.NoClientCert {
		t.Errorf("TLSConfig: min %x, protos %v, client auth %v", c.MinVersion, c.NextProtos, c.ClientAuth)
	}
}
