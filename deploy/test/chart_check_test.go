package deploytest

// The rendered configuration through faxgate's own validation: the live
// file and its shadow candidate, loaded as faxgate check loads them.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

// TestChartConfigPassesCheck runs the config each value set renders, and
// its shadow candidate if any, through the validation faxgate check and
// faxgate serve use, with the files the pod would have mounted (API key,
// proxy credentials, certificates) put in place.
func TestChartConfigPassesCheck(t *testing.T) {
	for name, file := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			rendered := mustRender(t, file)
			live, cand := checkRendered(t, rendered)
			if hasShadow := configMapData(t, rendered)["shadow.yaml"] != ""; (cand != nil) != hasShadow || live.Shadow.ConfigFile != "" != hasShadow {
				t.Errorf("shadow.yaml rendered %v, candidate loaded %v, shadow.config_file %q", hasShadow, cand != nil, live.Shadow.ConfigFile)
			}
		})
	}
}

// configMapData is the data of the ConfigMap that holds faxgate.yaml.
func configMapData(t *testing.T, rendered string) map[string]string {
	t.Helper()
	for _, o := range objects(t, rendered) {
		var m corev1.ConfigMap
		if o.Kind != "ConfigMap" {
			continue
		}
		if err := o.strict(&m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m.Data["faxgate.yaml"]; ok {
			return m.Data
		}
	}
	t.Fatal("no ConfigMap with faxgate.yaml rendered")
	return nil
}

// checkRendered loads the rendered ConfigMap's files as faxgate check does
// (the live file, then its shadow candidate, read relative to it), from a
// directory that stands for the pod's /etc/faxgate with what the Secrets
// would mount in place, and fails the test on any problem. cand is nil
// without a candidate.
func checkRendered(t *testing.T, rendered string) (live, cand *config.Config) {
	t.Helper()
	ca := tlstest.NewCA(t, "chart test CA")
	root := t.TempDir()
	data := configMapData(t, rendered)
	text := strings.ReplaceAll(data["faxgate.yaml"], "/etc/faxgate/", root+"/")
	c, err := config.Parse([]byte(text), nil)
	if err != nil {
		t.Fatalf("the rendered config does not parse: %v\n%s", err, text)
	}
	// What the Secrets would mount.
	put(t, c.Upstream.APIKeyFile, []byte("sk_chart_test"))
	if c.Upstream.ProxyAuthFile != "" {
		put(t, c.Upstream.ProxyAuthFile, []byte("egress-user:egress-password"))
	}
	if tc := c.Server.TLS; tc.CertFile != "" {
		pair := ca.Server(t, "faxgate.gateways.svc")
		put(t, tc.CertFile, pair.CertPEM)
		put(t, tc.KeyFile, pair.KeyPEM)
		if tc.ClientCAFile != "" {
			put(t, tc.ClientCAFile, ca.CertPEM)
		}
	}
	// The ConfigMap's files, side by side as its volume mounts them.
	dir := filepath.Join(root, "config")
	for name, content := range data {
		put(t, filepath.Join(dir, name), []byte(strings.ReplaceAll(content, "/etc/faxgate/", root+"/")))
	}
	path := filepath.Join(dir, "faxgate.yaml")
	getenv := func(k string) (string, bool) {
		if k == "FAXGATE_REDIS_PASSWORD" && c.Redis.PasswordEnv == k ||
			k == "FAXGATE_REDIS_SENTINEL_PASSWORD" && c.Redis.SentinelPasswordEnv == k {
			return "redis-password", true
		}
		return "", false
	}
	live, err = config.LoadAndCheck(path, getenv)
	if err != nil {
		t.Fatalf("faxgate check refuses the rendered config: %v\n%s", err, text)
	}
	cand, err = config.LoadCandidate(live, path, getenv, true)
	if err != nil {
		t.Fatalf("faxgate check refuses the rendered shadow candidate: %v\n%s", err, data["shadow.yaml"])
	}
	return live, cand
}

// put writes a file the way a mounted Secret would hold it.
func put(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
