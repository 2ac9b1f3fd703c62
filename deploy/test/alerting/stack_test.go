//go:build alerting

package alerting

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"

	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// binDir holds faxgate and faxsim, built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "faxgate-alerting-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The test's cluster external label, and its API key (faxsim accepts only
// goodKey).
const (
	cluster = "e2e"
	goodKey = "e2e-api-key-0123456789"
	badKey  = "e2e-api-key-revoked"
)

// release is one Helm release of faxgate in the test: its replicas share a
// configuration (but for ports), a namespace and a job. Both releases have
// the same name, as the docs' own `helm install faxgate` run in two
// namespaces does: only the namespace tells them apart.
type release struct {
	name      string // Helm release name
	fullname  string // what the chart names it, and the job label
	namespace string
	replicas  []*replica
}

// replica is one faxgate process of a release.
type replica struct {
	pod   string // the pod label Prometheus gives it
	url   string // proxy listener
	admin string // admin listener, host:port
	p     *proc
}

// stack is everything one test runs: Redis, faxsim behind the test's vendor
// front, two releases of one name in two namespaces with two replicas each,
// Prometheus and Alertmanager with the test's webhooks.
type stack struct {
	dir      string
	vendor   *vendor
	releases []*release
	prom     *promAPI
	am       *proc
	hooks    map[string]*webhook // receiver name -> its webhook
}

// stackOptions says what a test wants of its stack.
type stackOptions struct {
	// shortFor replaces every alert's for: with 5s (the event tests); the
	// soak keeps the real durations.
	shortFor bool
	// keyB is the API key release B uses.
	keyB string
}

// The two releases: one Helm release name, two namespaces (A and B).
var releaseSpecs = []struct{ name, namespace string }{
	{"faxgate", "payments"},
	{"faxgate", "fax-staging"},
}

func startStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	helm := tool(t, "helm")
	promBin := tool(t, "prometheus")
	amBin := tool(t, "alertmanager")
	s := &stack{dir: t.TempDir(), hooks: map[string]*webhook{}}

	rdb := redistest.Start(t)
	simAddr := startFaxsim(t, s.dir)
	s.vendor = newVendor(t, "http://"+simAddr)

	var ruleFiles []string
	for i, spec := range releaseSpecs {
		// The chart's full name: the release name when it holds the
		// chart's name.
		fullname := spec.name
		if !strings.Contains(spec.name, "faxgate") {
			fullname += "-faxgate"
		}
		r := &release{name: spec.name, fullname: fullname, namespace: spec.namespace}
		key := goodKey
		if i == 1 && o.keyB != "" {
			key = o.keyB
		}
		keyFile := filepath.Join(s.dir, r.namespace+".key")
		writeFile(t, keyFile, key)
		for n := range 2 {
			rep := &replica{pod: fmt.Sprintf("%s-%d", r.fullname, n)}
			port, admin := freePort(t), freePort(t)
			rep.url = fmt.Sprintf("http://127.0.0.1:%d", port)
			rep.admin = fmt.Sprintf("127.0.0.1:%d", admin)
			cfg := filepath.Join(s.dir, r.namespace+"-"+rep.pod+".yaml")
			writeFile(t, cfg, faxgateConfig(port, admin, s.vendor.srv.URL, keyFile, rdb.Addr, r.namespace))
			rep.p = startProc(t, r.namespace+"/"+rep.pod, filepath.Join(binDir, "faxgate"), "serve", "--config", cfg)
			r.replicas = append(r.replicas, rep)
		}
		ruleFiles = append(ruleFiles, renderRules(t, helm, s.dir, r, o.shortFor))
		s.releases = append(s.releases, r)
	}
	for _, r := range s.releases {
		for _, rep := range r.replicas {
			waitHTTP(t, rep.p, "http://"+rep.admin+"/healthz", 20*time.Second)
		}
	}

	amAddr := s.startAlertmanager(t, amBin)
	s.prom = startPrometheus(t, promBin, s.dir, s.releases, ruleFiles, amAddr)
	return s
}

// release returns the release in namespace ns.
func (s *stack) release(ns string) *release {
	for _, r := range s.releases {
		if r.namespace == ns {
			return r
		}
	}
	panic("no release in " + ns)
}

// faxgateConfig is one replica's configuration file (docs/configuration.md):
// its own ports, the release's key file and Redis key prefix (its namespace:
// the two releases share one Redis and a name), the test's
// callers (identified by header from loopback, as from a trusted proxy).
func faxgateConfig(port, admin int, upstream, keyFile, redisAddr, release string) string {
	return fmt.Sprintf(`server:
  listen: "127.0.0.1:%d"
  shutdown_timeout: 10s
admin:
  listen: "127.0.0.1:%d"
upstream:
  base_url: %q
  api_key_file: %q
  api_key_env: ""
  timeout: 30s
token:
  store: redis
  retry_min: 1s
  retry_max: 5s
redis:
  addrs: [%q]
  key_prefix: "%s:"
callers:
  identity_header: X-Faxgate-Caller
  trusted_proxies: ["127.0.0.0/8"]
  unidentified: deny
  list:
    - name: intake
      header_values: [intake]
      allow: ["contacts.*", "numbers.available_list"]
    - name: sender
      header_values: [sender]
      allow: ["faxes.*", "contacts.*"]
    - name: batch
      header_values: [batch]
      allow: ["contacts.*"]
      rate_limit: { rps: 2, burst: 2 }
rate_limit:
  backend: redis
  default: { rps: 100, burst: 200 }
  replicas_hint: 2
routes:
  extra:
    - { name: faxes.send, method: POST, path: /v1/faxes/send }
# A daily budget far above the test's traffic: its windows and who spends
# them show on the dashboard, and nothing nears its limit.
upstream_budget:
  limits:
    - { name: daily, scope: tenant, requests: 100000, per: 24h }
log:
  level: warn
`, port, admin, upstream, keyFile, redisAddr, release)
}

// startFaxsim runs the faxsim binary on a free port and returns its address.
func startFaxsim(t *testing.T, dir string) string {
	t.Helper()
	keyFile := filepath.Join(dir, "faxsim.key")
	writeFile(t, keyFile, goodKey)
	p := startProc(t, "faxsim", filepath.Join(binDir, "faxsim"), "--listen", "127.0.0.1:0", "--api-key-file", keyFile)
	re := regexp.MustCompile(`faxsim listening on (\S+)`)
	var addr string
	eventually.EventuallyErr(t, 10*time.Second, "faxsim listening", func() error {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			addr = m[1]
			return nil
		}
		if !p.running() {
			t.Fatalf("faxsim exited: %s", p.out.String())
		}
		return errNotFound
	})
	return addr
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// scrapeConfig is one Prometheus scrape job per release, as the Prometheus
// Operator makes one per ServiceMonitor (serviceMonitor/<namespace>/<name>),
// each target with the job label the chart's ServiceMonitor sets (the full
// name: the same for both releases) and the namespace and pod labels the
// operator gives it.
func scrapeConfig(releases []*release) string {
	var b strings.Builder
	b.WriteString("scrape_configs:\n")
	for _, r := range releases {
		fmt.Fprintf(&b, "  - job_name: %q\n    static_configs:\n", "serviceMonitor/"+r.namespace+"/"+r.fullname)
		for _, rep := range r.replicas {
			fmt.Fprintf(&b, "      - targets: [%q]\n        labels: {job: %q, namespace: %q, pod: %q}\n", rep.admin, r.fullname, r.namespace, rep.pod)
		}
	}
	return b.String()
}

// newServer is an httptest server closed when the test ends.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
