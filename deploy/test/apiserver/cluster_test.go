//go:build apiserver

// Package apiserver runs the Helm chart against a real Kubernetes API
// server: etcd and kube-apiserver started on loopback by the test, the
// Prometheus Operator's CRDs installed, and the real helm installing,
// upgrading, rolling back and uninstalling the chart (docs/deployment.md, On
// a real API server). There are no nodes and no controllers, so no pod ever
// runs: what is proven is that the server's own validation (the built-in
// types, the CRDs' schemas, the update rules) accepts every object the
// chart makes, through a release's whole life. Build tag apiserver: make
// test-apiserver.
package apiserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/pinnedtool"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

// repoRoot is the faxgate checkout this package sits in.
const repoRoot = "../../.."

// cluster is a running etcd and kube-apiserver, and a kubeconfig for them.
type cluster struct {
	kubeconfig string
	server     string
	token      string
	pool       *x509.CertPool
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs bin until the test ends (SIGTERM, then SIGKILL after 10 s);
// a failed test prints the tail of its output.
func start(t *testing.T, name, bin string, args ...string) {
	t.Helper()
	out := &syncbuf.Buffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			s := out.String()
			t.Logf("--- output of %s (last 4 KiB) ---\n%s", name, s[max(0, len(s)-4096):])
		}
	})
}

// startCluster starts etcd and kube-apiserver on loopback, with a serving
// certificate and a service-account key made here, and a static token in
// system:masters for helm.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	etcd, apiserver := pinnedtool.Find(t, "etcd"), pinnedtool.Find(t, "kube-apiserver")
	dir := t.TempDir()

	client, peer := freePort(t), freePort(t)
	clientURL, peerURL := fmt.Sprintf("http://127.0.0.1:%d", client), fmt.Sprintf("http://127.0.0.1:%d", peer)
	start(t, "etcd", etcd, "--name", "faxgate-test", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "faxgate-test="+peerURL, "--log-level", "warn",
		// A test's data need not survive a crash: no fsync, a smaller
		// database.
		"--unsafe-no-fsync", "--quota-backend-bytes", strconv.Itoa(512<<20))
	eventually.EventuallyErr(t, time.Minute, "etcd answers /health", func() error {
		resp, err := http.Get(clientURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})

	ca := tlstest.NewCA(t, "faxgate apiserver test CA")
	certFile, keyFile := ca.Server(t, "kubernetes", "kubernetes.default.svc").WriteFiles(t, dir)
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		t.Fatal(err)
	}
	saFile := filepath.Join(dir, "sa.key")
	tlstest.WriteFile(t, saFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	var tok [24]byte
	rand.Read(tok[:])
	token := base64.RawURLEncoding.EncodeToString(tok[:])
	tokens := filepath.Join(dir, "tokens.csv")
	tlstest.WriteFile(t, tokens, []byte(token+",faxgate-test-admin,faxgate-test-admin,system:masters\n"))

	port := freePort(t)
	start(t, "kube-apiserver", apiserver,
		"--etcd-servers", clientURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saFile, "--service-account-signing-key-file", saFile,
		// Cluster IPs are handed out from this range and never dialled:
		// there is no node, no kube-proxy and no pod.
		"--service-cluster-ip-range", "10.96.0.0/16",
		// Nothing is advertised: no kubernetes Service endpoints to keep.
		"--endpoint-reconciler-type", "none",
		"--enable-priority-and-fairness=false",
		"--profiling=false", "-v", "1")
	c := &cluster{server: fmt.Sprintf("https://127.0.0.1:%d", port), token: token, pool: ca.Pool()}
	httpc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.pool}}}
	eventually.EventuallyErr(t, 3*time.Minute, "kube-apiserver answers /readyz", func() error {
		req, _ := http.NewRequest("GET", c.server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d: %s", resp.StatusCode, b.String())
		}
		return nil
	})
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	tlstest.WriteFile(t, c.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: admin
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, c.server, base64.StdEncoding.EncodeToString(ca.CertPEM), token)))
	return c
}

// helm runs the pinned helm against the cluster and returns its output.
func (c *cluster) helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pinnedtool.Find(t, "helm"), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c *cluster) mustHelm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// do sends one request to the server with the admin token.
func (c *cluster) do(t *testing.T, method, path, contentType string, body []byte) (int, string) {
	t.Helper()
	httpc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.pool}}}
	req, err := http.NewRequest(method, c.server+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// get reads an object from the server as JSON; "" when it does not exist.
func (c *cluster) get(t *testing.T, path string) string {
	t.Helper()
	code, body := c.do(t, "GET", path, "", nil)
	if code == http.StatusNotFound {
		return ""
	}
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

// create posts a YAML manifest to the collection at path.
func (c *cluster) create(t *testing.T, path string, manifest []byte) {
	t.Helper()
	if code, body := c.do(t, "POST", path, "application/yaml", manifest); code != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", path, code, body)
	}
}
