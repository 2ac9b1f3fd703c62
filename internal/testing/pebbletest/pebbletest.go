// Package pebbletest runs Pebble, Let's Encrypt's ACME test server
// (github.com/letsencrypt/pebble/v2), as a process for tests of mode acme,
// the way internal/testing/redistest runs redis-server.
//
// The binary is built once per machine with `go install
// github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.1` into a directory
// under the user cache, from the module proxy or the module cache: faxgate's
// go.mod does not require Pebble, whose dependencies would otherwise enter
// faxgate's module graph. Pebble's validation is real (no
// PEBBLE_VA_ALWAYS_VALID): it connects to the domain being validated, at the
// tlsPort and httpPort a test names, so tests use the name "localhost" and
// point those ports at the gateway's listeners.
//
// When Pebble cannot be built (no network, no module cache) the test is
// skipped, or fails when the environment variable CI is "true".
package pebbletest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"
)

// Version is the Pebble release the tests run.
const Version = "v2.10.1"

const module = "github.com/letsencrypt/pebble/v2"

// Options configure Start.
type Options struct {
	// TLSPort is the port Pebble connects to for tls-alpn-01 validation.
	TLSPort int
	// HTTPPort is the port Pebble connects to for http-01 validation.
	HTTPPort int
}

// Server is a running Pebble.
type Server struct {
	// Directory is the ACME directory URL (https, Pebble's own certificate).
	Directory string
	// CAFile is the PEM file of the root that signed Pebble's own
	// certificate: acme.ca_root_file.
	CAFile string
	// ManagementURL is the base URL of Pebble's management API.
	ManagementURL string

	client *http.Client
	out    *syncbuf.Buffer
}

var build struct {
	once     sync.Once
	bin, src string
	err      error
}

// binary builds Pebble once per process (and reuses an earlier process's
// build), and finds its source directory, which holds its test certificates.
func binary(t testing.TB) (bin, src string) {
	t.Helper()
	build.once.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "faxgate-pebbletest", Version)
		build.bin = filepath.Join(dir, "pebble")
		// The module's source directory, downloaded if need be.
		out, err := exec.Command("go", "mod", "download", "-json", module+"@"+Version).Output()
		if err != nil {
			build.err = fmt.Errorf("go mod download %s@%s: %v", module, Version, err)
			return
		}
		var m struct{ Dir string }
		if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
			build.err = fmt.Errorf("go mod download %s@%s: no source directory in %q", module, Version, out)
			return
		}
		build.src = m.Dir
		if _, err := os.Stat(build.bin); err == nil {
			return
		}
		// Built in a directory of its own, then renamed into place, so
		// that test binaries building at once never run half a file.
		tmp, err := os.MkdirTemp(cache, "faxgate-pebbletest-build-")
		if err != nil {
			build.err = err
			return
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("go", "install", module+"/cmd/pebble@"+Version)
		cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go install %s/cmd/pebble@%s: %v\n%s", module, Version, err, b)
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			build.err = err
			return
		}
		build.err = os.Rename(filepath.Join(tmp, "pebble"), build.bin)
	})
	if build.err != nil {
		msg := "pebbletest: cannot build Pebble (CI fails instead of skipping): " + build.err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return build.bin, build.src
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start runs Pebble on free loopback ports, waits until its directory
// answers, and stops it when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, src := binary(t)
	dir := t.TempDir()
	certs := filepath.Join(src, "test", "certs")
	listen, mgmt := FreePort(t), FreePort(t)
	conf := map[string]any{"pebble": map[string]any{
		"listenAddress":                  fmt.Sprintf("127.0.0.1:%d", listen),
		"managementListenAddress":        fmt.Sprintf("127.0.0.1:%d", mgmt),
		"certificate":                    filepath.Join(certs, "localhost", "cert.pem"),
		"privateKey":                     filepath.Join(certs, "localhost", "key.pem"),
		"httpPort":                       o.HTTPPort,
		"tlsPort":                        o.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"retryAfter":                     map[string]int{"authz": 1, "order": 1},
		"keyAlgorithm":                   "ecdsa",
		"profiles": map[string]any{"default": map[string]any{
			"description": "tests", "validityPeriod": 7776000}},
	}}
	b, _ := json.Marshal(conf)
	confFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(confFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{
		Directory:     fmt.Sprintf("https://localhost:%d/dir", listen),
		ManagementURL: fmt.Sprintf("https://localhost:%d", mgmt),
		CAFile:        filepath.Join(certs, "pebble.minica.pem"),
		out:           &syncbuf.Buffer{},
	}
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatalf("pebbletest: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	s.client = &http.Client{Transport: tr, Timeout: 5 * time.Second}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-config", confFile)
	// No random sleep before validation, no rejected nonces: real
	// validation, minus the delays that make tests slow and flaky.
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("pebbletest: start: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("pebble output:\n%s", s.out.String())
		}
	})
	eventually.EventuallyErr(t, 10*time.Second, "pebbletest: directory "+s.Directory+" answering", func() error {
		select {
		case <-done:
			t.Fatalf("pebbletest: pebble exited:\n%s", s.out.String())
		default:
		}
		resp, err := s.client.Get(s.Directory)
		if err != nil {
			return fmt.Errorf("%v\n%s", err, s.out.String())
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s\n%s", resp.Status, s.out.String())
		}
		return nil
	})
	return s
}

// Roots is the pool of Pebble's issuing root (management /roots/0): what
// a client of a gateway with a Pebble certificate trusts.
func (s *Server) Roots(t testing.TB) *x509.CertPool {
	t.Helper()
	resp, err := s.client.Get(s.ManagementURL + "/roots/0")
	if err != nil {
		t.Fatalf("pebbletest: roots: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if resp.StatusCode != http.StatusOK || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("pebbletest: roots: %s %q", resp.Status, b)
	}
	return pool
}

// Orders is how many ACME orders Pebble has accepted (from its log).
func (s *Server) Orders() int { return strings.Count(s.out.String(), "Added order ") }

// Output is what Pebble has logged so far.
func (s *Server) Output() string { return s.out.String() }
