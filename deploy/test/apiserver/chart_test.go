//go:build apiserver

package apiserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/pinnedtool"
)

const chartDir = repoRoot + "/deploy/helm/faxgate"

// installCRDs creates the Prometheus Operator's CRDs (the pinned copy
// .ci/install-tools keeps beside the tools) as a cluster admin applies them,
// outside any release: a Helm release holding them all would not fit the
// 1 MiB of its release Secret. Then the namespace everything.yaml puts the
// dashboard in.
func installCRDs(t *testing.T, c *cluster) {
	t.Helper()
	src := pinnedtool.Find(t, "prometheus-operator-crd")
	files, err := filepath.Glob(filepath.Join(src, "monitoring.coreos.com_*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("CRDs in %s: %v %v", src, files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c.create(t, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", b)
	}
	for _, crd := range []string{"servicemonitors", "prometheusrules"} {
		path := "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + crd + ".monitoring.coreos.com"
		eventually.Eventually(t, time.Minute, "CRD "+crd+" established", func() bool {
			var o struct {
				Status struct {
					Conditions []struct{ Type, Status string } `json:"conditions"`
				} `json:"status"`
			}
			json.Unmarshal([]byte(c.get(t, path)), &o)
			for _, cond := range o.Status.Conditions {
				if cond.Type == "Established" && cond.Status == "True" {
					return true
				}
			}
			return false
		})
	}
	c.create(t, "/api/v1/namespaces", []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: monitoring}\n"))
}

// bumpedChart is a copy of the chart with another version, as the next
// release of the chart would be.
func bumpedChart(t *testing.T) (dir, version string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "faxgate")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^version: (\S+)$`)
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatal("no version in Chart.yaml")
	}
	version = string(m[1]) + "-next"
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), re.ReplaceAll(b, []byte("version: "+version)), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, version
}

// object is the parts of a stored object the test reads.
type object struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

func decode(t *testing.T, s string) object {
	t.Helper()
	var o object
	if err := json.Unmarshal([]byte(s), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestChartOnARealAPIServer: with each of the chart's main value sets (the
// monitoring objects on), a release installs, upgrades with changed values,
// upgrades to a new chart version, rolls back and uninstalls on a real API
// server with the Prometheus Operator's CRDs, every object accepted by the
// server's own validation at every step; two releases of one name live in
// two namespaces side by side.
func TestChartOnARealAPIServer(t *testing.T) {
	c := startCluster(t)
	installCRDs(t, c)
	next, nextVersion := bumpedChart(t)
	monitoring := "serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true"

	// The server does validate: a ServiceMonitor whose interval the CRD's
	// schema refuses (the chart's own schema lets the string through) is
	// refused by the server, and the release fails.
	out, err := c.helm(t, "install", "refused", chartDir, "--namespace", "refused", "--create-namespace",
		"-f", "../testdata/values/default.yaml", "--set", monitoring, "--set", "serviceMonitor.interval=soon")
	if err == nil || !strings.Contains(out, "spec.endpoints[0].interval") {
		t.Fatalf("an invalid ServiceMonitor was accepted: %v\n%s", err, out)
	}

	// Two releases of one name, in two namespaces, side by side: nothing
	// of one is the other's (no cluster-wide object, no shared name), and
	// each one's rules select its own namespace.
	for _, ns := range []string{"payments", "fax-staging"} {
		c.mustHelm(t, "install", "faxgate", chartDir, "--namespace", ns, "--create-namespace", "-f", "../testdata/values/default.yaml", "--set", monitoring)
	}
	for _, ns := range []string{"payments", "fax-staging"} {
		if r := c.get(t, "/apis/monitoring.coreos.com/v1/namespaces/"+ns+"/prometheusrules/faxgate"); !strings.Contains(r, `namespace=\"`+ns+`\"`) {
			t.Errorf("the PrometheusRule in %s does not select its own namespace:\n%.2000s", ns, r)
		}
		c.mustHelm(t, "uninstall", "faxgate", "--namespace", ns)
	}

	for _, tc := range []struct{ values, namespace string }{
		{"default", "payments"},
		{"replicas-redis", "fleet"},
		{"hpa-redis", "autoscaled"},
		{"everything", "gateways"},
	} {
		t.Run(tc.values+"/"+tc.namespace, func(t *testing.T) {
			values := "../testdata/values/" + tc.values + ".yaml"
			ns := tc.namespace
			deploy := "/apis/apps/v1/namespaces/" + ns + "/deployments/faxgate"
			configMap := "/api/v1/namespaces/" + ns + "/configmaps/faxgate"
			rule := "/apis/monitoring.coreos.com/v1/namespaces/" + ns + "/prometheusrules/faxgate"
			monitor := "/apis/monitoring.coreos.com/v1/namespaces/" + ns + "/servicemonitors/faxgate"

			c.mustHelm(t, "install", "faxgate", chartDir, "--namespace", ns, "--create-namespace", "-f", values, "--set", monitoring)
			for _, path := range []string{deploy, configMap, rule, monitor, "/api/v1/namespaces/" + ns + "/services/faxgate-metrics"} {
				if c.get(t, path) == "" {
					t.Errorf("after install, %s does not exist", path)
				}
			}
			chartLabel := decode(t, c.get(t, deploy)).Metadata.Labels["helm.sh/chart"]

			// A values change: the ConfigMap changes and the pod template
			// with it (the checksum), under the same immutable selector.
			c.mustHelm(t, "upgrade", "faxgate", chartDir, "--namespace", ns, "-f", values, "--set", monitoring,
				"--set", "config.log.level=debug", "--set", "podLabels.upgraded=values")
			if cfg := decode(t, c.get(t, configMap)).Data["faxgate.yaml"]; !strings.Contains(cfg, "level: debug") {
				t.Errorf("after the values upgrade, the ConfigMap holds\n%s", cfg)
			}

			// A new chart version: every object carries its label.
			c.mustHelm(t, "upgrade", "faxgate", next, "--namespace", ns, "-f", values, "--set", monitoring, "--set", "config.log.level=debug")
			if got := decode(t, c.get(t, deploy)).Metadata.Labels["helm.sh/chart"]; got != "faxgate-"+nextVersion {
				t.Errorf("after the chart upgrade, helm.sh/chart = %q, want faxgate-%s", got, nextVersion)
			}
			if got := decode(t, c.get(t, rule)).Metadata.Labels["helm.sh/chart"]; got != "faxgate-"+nextVersion {
				t.Errorf("after the chart upgrade, the PrometheusRule's helm.sh/chart = %q", got)
			}

			// Back to the first revision: the first chart and values.
			c.mustHelm(t, "rollback", "faxgate", "1", "--namespace", ns)
			if got := decode(t, c.get(t, deploy)).Metadata.Labels["helm.sh/chart"]; got != chartLabel {
				t.Errorf("after the rollback, helm.sh/chart = %q, want %q", got, chartLabel)
			}
			if cfg := decode(t, c.get(t, configMap)).Data["faxgate.yaml"]; strings.Contains(cfg, "level: debug") {
				t.Errorf("after the rollback, the ConfigMap still holds the upgrade's values")
			}
			if h := c.mustHelm(t, "history", "faxgate", "--namespace", ns, "--max", "10"); strings.Count(h, "\n") != 5 {
				t.Errorf("history of 4 revisions, got\n%s", h)
			}

			c.mustHelm(t, "uninstall", "faxgate", "--namespace", ns)
			for _, path := range []string{deploy, configMap, rule, monitor} {
				if c.get(t, path) != "" {
					t.Errorf("after uninstall, %s still exists", path)
				}
			}
		})
	}
}
