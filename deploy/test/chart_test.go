package deploytest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/faxgate/faxgate/internal/config"
)

func TestChartLintsStrictly(t *testing.T) {
	helm := tool(t, "helm")
	for name, file := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			out, err := run(t, ".", helm, "lint", "--strict", "--kube-version", kubeVersion, "-f", file, chartDir)
			if err != nil || !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint --strict: %v\n%s", err, out)
			}
		})
	}
}

// TestChartGolden renders every value set and compares it with
// testdata/golden: a chart change shows up as a diff to review. Run with
// -update to accept it.
func TestChartGolden(t *testing.T) {
	for name, file := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			got := mustRender(t, file)
			golden := filepath.Join("testdata", "golden", name+".yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestChartGolden -update and review the new file)", err)
			}
			if got != string(want) {
				t.Errorf("render differs from %s (go test -run TestChartGolden -update, then review git diff):\n%s",
					golden, firstDiff(string(want), got))
			}
		})
	}
}

// firstDiff shows the first differing line with a little context.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  golden: %q\n  render: %q", i+1, wl, gl)
		}
	}
	return ""
}

// TestChartObjectsDecodeStrictly decodes every rendered object into its
// Kubernetes API type with unknown fields refused: a misspelt or misplaced
// field fails here rather than being dropped by the API server.
func TestChartObjectsDecodeStrictly(t *testing.T) {
	for name, file := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			for _, o := range objects(t, mustRender(t, file)) {
				out := typed(o.Kind)
				if out == nil {
					t.Errorf("%s %s: a kind this test does not know; add its type", o.Kind, o.Metadata.Name)
					continue
				}
				if err := o.strict(out); err != nil {
					t.Errorf("%s %s: %v", o.Kind, o.Metadata.Name, err)
				}
			}
		})
	}
}

func deployment(t *testing.T, rendered string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := find(objects(t, rendered), "Deployment").strict(&d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestChartPodIsHardened: non-root, read-only root, no escalation, no
// capabilities, RuntimeDefault seccomp, requests set, probes on the admin
// port, and every Secret mounted as a directory (no subPath) so that
// rotations reach the running pod.
func TestChartPodIsHardened(t *testing.T) {
	for name, file := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			d := deployment(t, mustRender(t, file))
			ps := d.Spec.Template.Spec
			if psc := ps.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
				psc.RunAsUser == nil || *psc.RunAsUser == 0 || psc.SeccompProfile == nil ||
				psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod security context %+v", psc)
			}
			if len(ps.Containers) != 1 {
				t.Fatalf("%d containers", len(ps.Containers))
			}
			c := ps.Containers[0]
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
				t.Errorf("container security context %+v", sc)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("resource requests %v", c.Resources.Requests)
			}
			for probe, p := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != probe || p.HTTPGet.Port.String() != "admin" {
					t.Errorf("probe %s: %+v", probe, p)
				}
			}
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "admin" && p.ContainerPort == 9090 }) {
				t.Errorf("no admin port 9090: %+v", c.Ports)
			}
			for _, m := range c.VolumeMounts {
				if m.SubPath != "" || m.SubPathExpr != "" {
					t.Errorf("volume %s is mounted with a subPath: updates would not reach the pod", m.Name)
				}
			}
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
				t.Errorf("no preStop sleep: %+v", c.Lifecycle)
			}
		})
	}
}

// TestChartGracePeriodCoversTheDrain: the kubelet waits for the preStop
// delay and faxgate's whole drain budget before it kills the pod.
func TestChartGracePeriodCoversTheDrain(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want int64
	}{
		{nil, 30 + 5 + 5},
		{[]string{"config.server.shutdown_timeout=1m30s", "preStopDelaySeconds=10"}, 90 + 10 + 5},
		{[]string{"config.server.shutdown_timeout=2h"}, 7200 + 5 + 5},
		// Any duration faxgate takes: the schema no longer refuses these.
		{[]string{"config.server.shutdown_timeout=1.5m"}, 90 + 5 + 5},
		{[]string{"config.server.shutdown_timeout=2500ms"}, 3 + 5 + 5},
		{[]string{"terminationGracePeriodSeconds=120"}, 120},
	} {
		d := deployment(t, mustRender(t, "testdata/values/default.yaml", tc.set...))
		if got := d.Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != tc.want {
			t.Errorf("%v: terminationGracePeriodSeconds = %v, want %d", tc.set, got, tc.want)
		}
	}
	out, err := render(t, "testdata/values/default.yaml", "terminationGracePeriodSeconds=30")
	if err == nil || !strings.Contains(out, "terminationGracePeriodSeconds 30 must exceed config.server.shutdown_timeout (30s) plus preStopDelaySeconds (5)") {
		t.Errorf("a grace period shorter than the drain was accepted: %v\n%s", err, out)
	}
}

// TestChartChecksumsOnlyGeneratedObjects: a config change changes the pod
// template (and so rolls the pods); a change only to Secret names does not
// change the checksum, since faxgate reloads mounted files itself.
func TestChartChecksumsOnlyGeneratedObjects(t *testing.T) {
	sum := func(set ...string) string {
		d := deployment(t, mustRender(t, "testdata/values/default.yaml", set...))
		s := d.Spec.Template.Annotations["checksum/config"]
		if len(s) != 64 {
			t.Fatalf("checksum/config = %q", s)
		}
		return s
	}
	base := sum()
	if sum("config.log.level=debug") == base {
		t.Error("a config change leaves the checksum: the pods would not roll")
	}
	if sum("apiKey.existingSecret=another-secret") != base {
		t.Error("the checksum covers a Secret's name, not only generated objects")
	}
	if sum() != base {
		t.Error("the checksum is not stable")
	}
	for _, ann := range []string{"checksum/secret", "checksum/tls"} {
		if strings.Contains(mustRender(t, "testdata/values/everything.yaml"), ann) {
			t.Errorf("%s: a Secret is checksummed", ann)
		}
	}
}

// TestChartReplicasPDBAndHPA: with the HPA on, the Deployment has no
// replicas; a PDB exists only when two pods can always run.
func TestChartReplicasPDBAndHPA(t *testing.T) {
	for _, tc := range []struct {
		values       string
		replicas     int32 // 0: absent
		pdb, hpa     bool
		pdbMinOrMaxU string
	}{
		{"default", 1, false, false, ""},
		{"replicas-redis", 3, true, false, "minAvailable=2"},
		{"hpa-redis", 0, false, true, ""}, // minReplicas 1: a PDB could block every drain
		{"everything", 0, true, true, "maxUnavailable=1"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			objs := objects(t, mustRender(t, "testdata/values/"+tc.values+".yaml"))
			var d appsv1.Deployment
			if err := find(objs, "Deployment").strict(&d); err != nil {
				t.Fatal(err)
			}
			if tc.replicas == 0 && d.Spec.Replicas != nil {
				t.Errorf("replicas = %d with the HPA on", *d.Spec.Replicas)
			}
			if tc.replicas != 0 && (d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas) {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, tc.replicas)
			}
			if got := find(objs, "HorizontalPodAutoscaler") != nil; got != tc.hpa {
				t.Errorf("HPA rendered = %v, want %v", got, tc.hpa)
			}
			p := find(objs, "PodDisruptionBudget")
			if (p != nil) != tc.pdb {
				t.Fatalf("PDB rendered = %v, want %v", p != nil, tc.pdb)
			}
			if p != nil {
				var pdb policyv1.PodDisruptionBudget
				if err := p.strict(&pdb); err != nil {
					t.Fatal(err)
				}
				got := ""
				if pdb.Spec.MinAvailable != nil {
					got = "minAvailable=" + pdb.Spec.MinAvailable.String()
				} else if pdb.Spec.MaxUnavailable != nil {
					got = "maxUnavailable=" + pdb.Spec.MaxUnavailable.String()
				}
				if got != tc.pdbMinOrMaxU {
					t.Errorf("PDB %s, want %s", got, tc.pdbMinOrMaxU)
				}
				// Pods not ready because the vendor is down must not block a node drain.
				if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
					t.Errorf("PDB unhealthyPodEvictionPolicy = %v, want AlwaysAllow", p)
				}
			}
		})
	}
}

// decodeNamed decodes the rendered object of a kind and name strictly.
func decodeNamed(t *testing.T, objs []object, kind, name string, out any) {
	t.Helper()
	o := findNamed(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %s rendered", kind, name)
	}
	if err := o.strict(out); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
}

func servicePorts(svc *corev1.Service) map[string]string {
	ports := map[string]string{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = fmt.Sprint(p.Port, "->", p.TargetPort.String())
	}
	return ports
}

// TestChartAdminPortOnlyOnTheMetricsService: the proxy Service carries only
// the proxy port whatever service.type (a LoadBalancer must not publish
// /metrics, /budget or pprof); the admin port is on the ClusterIP
// <fullname>-metrics Service, which alone the ServiceMonitor selects.
func TestChartAdminPortOnlyOnTheMetricsService(t *testing.T) {
	for _, typ := range []string{"ClusterIP", "NodePort", "LoadBalancer"} {
		t.Run(typ, func(t *testing.T) {
			objs := objects(t, mustRender(t, "testdata/values/everything.yaml", "service.type="+typ, "service.adminPort=9191"))
			var proxy, metrics corev1.Service
			decodeNamed(t, objs, "Service", "faxgate", &proxy)
			decodeNamed(t, objs, "Service", "faxgate-metrics", &metrics)
			if got := servicePorts(&proxy); len(got) != 1 || got["proxy"] != "8080->proxy" || string(proxy.Spec.Type) != typ {
				t.Errorf("proxy Service %s ports %v, want %s with proxy 8080->proxy only", proxy.Spec.Type, got, typ)
			}
			if got := servicePorts(&metrics); len(got) != 1 || got["admin"] != "9191->admin" || metrics.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("metrics Service %s ports %v, want ClusterIP with admin 9191->admin only", metrics.Spec.Type, got)
			}
			var sm serviceMonitor
			decodeNamed(t, objs, "ServiceMonitor", "faxgate", &sm)
			sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Matches(labels.Set(metrics.Labels)) || sel.Matches(labels.Set(proxy.Labels)) {
				t.Errorf("ServiceMonitor selector %v: matches metrics Service %v, proxy Service %v; want only the metrics one",
					sel, sel.Matches(labels.Set(metrics.Labels)), sel.Matches(labels.Set(proxy.Labels)))
			}
			if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
			}
		})
	}
}

// TestChartServiceMonitorRelabelings: the chart's relabeling keeps the job
// the full name (the rules and dashboards select on it, and the metrics
// Service's name would otherwise become the job); the values' relabelings
// follow it, and metricRelabelings are passed through.
func TestChartServiceMonitorRelabelings(t *testing.T) {
	for _, tc := range []struct {
		name, values    string
		set             []string
		job             string
		relabelings     int
		metricRelabeled bool
	}{
		{"defaults", "testdata/values/default.yaml", []string{"serviceMonitor.enabled=true"}, "faxgate", 1, false},
		{"everything", "testdata/values/everything.yaml", nil, "faxgate", 2, true},
		{"another full name", "testdata/values/everything.yaml", []string{"fullnameOverride=fax-gw"}, "fax-gw", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(t, mustRender(t, tc.values, tc.set...))
			var sm serviceMonitor
			decodeNamed(t, objs, "ServiceMonitor", tc.job, &sm)
			ep := sm.Spec.Endpoints[0]
			if len(ep.Relabelings) != tc.relabelings {
				t.Fatalf("relabelings %+v, want %d", ep.Relabelings, tc.relabelings)
			}
			if r := ep.Relabelings[0]; r.TargetLabel != "job" || r.Replacement != tc.job || r.Action != "replace" || len(r.SourceLabels) != 0 {
				t.Errorf("first relabeling %+v, want job replaced by %q", r, tc.job)
			}
			if tc.relabelings == 2 && ep.Relabelings[1].TargetLabel != "node" {
				t.Errorf("the values' relabeling is not second: %+v", ep.Relabelings)
			}
			if got := len(ep.MetricRelabelings) == 1 && ep.MetricRelabelings[0].Action == "drop"; got != tc.metricRelabeled {
				t.Errorf("metricRelabelings %+v", ep.MetricRelabelings)
			}
		})
	}
}

// TestChartOwnedConfigKeys: the chart writes the keys that must agree with
// the pod (ports, mounted files, the password's variable); the key itself is
// never in any rendered object.
func TestChartOwnedConfigKeys(t *testing.T) {
	out := mustRender(t, "testdata/values/everything.yaml")
	var m corev1.ConfigMap
	if err := find(objects(t, out), "ConfigMap").strict(&m); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse([]byte(m.Data["faxgate.yaml"]), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{
		{c.Server.Listen, ":8080"},
		{c.Admin.Listen, ":9090"},
		{c.Upstream.APIKeyFile, "/etc/faxgate/api-key/key"},
		{c.Upstream.APIKeyEnv, ""},
		{c.Upstream.ProxyURL, "http://egress-proxy.egress.svc:3128"},
		{c.Upstream.ProxyAuthFile, "/etc/faxgate/proxy-auth/proxy-auth"},
		{c.Shadow.ConfigFile, "shadow.yaml"},
		{c.Redis.PasswordEnv, "FAXGATE_REDIS_PASSWORD"},
		{c.Server.TLS.Mode, "files"},
		{c.Server.TLS.CertFile, "/etc/faxgate/tls/tls.crt"},
		{c.Server.TLS.KeyFile, "/etc/faxgate/tls/tls.key"},
		{c.Server.TLS.ClientCAFile, "/etc/faxgate/client-ca/ca.crt"},
		{c.Server.TLS.ClientAuth, "require"},
	} {
		if kv[0] != kv[1] {
			t.Errorf("rendered %q, want %q", kv[0], kv[1])
		}
	}
	d := deployment(t, out)
	env := d.Spec.Template.Spec.Containers[0].Env
	if len(env) < 1 || env[0].Name != "FAXGATE_REDIS_PASSWORD" || env[0].ValueFrom == nil ||
		env[0].ValueFrom.SecretKeyRef == nil || env[0].ValueFrom.SecretKeyRef.Name != "redis-auth" {
		t.Errorf("redis password env %+v", env)
	}
}

// TestChartNotes: NOTES.txt tells how to check the key and open the status
// page. helm template does not print NOTES and helm install --dry-run wants
// a cluster, so this renders through helm's own Go packages (the same
// version as the pinned CLI), client only.
func TestChartNotes(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	notes := func(valuesFile string) string {
		b, err := os.ReadFile(valuesFile)
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]any{}
		if err := yaml.Unmarshal(b, &vals); err != nil {
			t.Fatal(err)
		}
		install := action.NewInstall(&action.Configuration{})
		install.ClientOnly, install.DryRun = true, true
		install.ReleaseName, install.Namespace = "faxgate", "gateways"
		install.KubeVersion = &chartutil.KubeVersion{Version: "v" + kubeVersion, Major: "1", Minor: strings.Split(kubeVersion, ".")[1]}
		rel, err := install.Run(chrt, vals)
		if err != nil {
			t.Fatalf("%s: %v", valuesFile, err)
		}
		return rel.Info.Notes
	}
	for _, values := range []string{"testdata/values/hpa-redis.yaml", "testdata/values/replicas-redis.yaml", "testdata/values/default.yaml"} {
		if n := notes(values); strings.Contains(n, "WARNING") || !strings.Contains(n, "helm test faxgate -n gateways") {
			t.Errorf("%s: notes\n%s", values, n)
		}
		// The status page (docs/status-page.md) through the metrics
		// Service, the one Service with the admin port.
		if n := notes(values); !strings.Contains(n, "kubectl port-forward -n gateways svc/faxgate-metrics 9090:9090") ||
			!strings.Contains(n, "http://127.0.0.1:9090/") {
			t.Errorf("%s: notes do not tell how to open the status page\n%s", values, n)
		}
	}
}

// TestChartPodLabels: the pods carry the chart's standard labels and
// podLabels, which cannot override them; the Deployment's selector stays the
// two selector labels (a changed selector breaks every upgrade).
func TestChartPodLabels(t *testing.T) {
	d := deployment(t, mustRender(t, "testdata/values/everything.yaml",
		"podLabels.app\\.kubernetes\\.io/name=other", "podLabels.app\\.kubernetes\\.io/version=9"))
	wantSelector := map[string]string{"app.kubernetes.io/name": "faxgate", "app.kubernetes.io/instance": "faxgate"}
	if got := d.Spec.Selector.MatchLabels; !maps.Equal(got, wantSelector) || len(d.Spec.Selector.MatchExpressions) != 0 {
		t.Errorf("selector %+v, want %v", d.Spec.Selector, wantSelector)
	}
	for k, v := range map[string]string{
		"app.kubernetes.io/name":       "faxgate",
		"app.kubernetes.io/instance":   "faxgate",
		"app.kubernetes.io/version":    "0.1.0",
		"app.kubernetes.io/managed-by": "Helm",
		"helm.sh/chart":                d.Labels["helm.sh/chart"],
		"team":                         "platform",
	} {
		if got := d.Spec.Template.Labels[k]; got != v || v == "" {
			t.Errorf("pod label %s = %q, want %q", k, got, v)
		}
	}
}

// TestChartTopologySpreadConstraints: the raw constraints are rendered with
// tpl, before the two of topologySpread, and alone when it is off.
func TestChartTopologySpreadConstraints(t *testing.T) {
	keys := func(set ...string) []string {
		d := deployment(t, mustRender(t, "testdata/values/everything.yaml", set...))
		var k []string
		for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
			k = append(k, c.TopologyKey)
			if c.TopologyKey == "topology.kubernetes.io/region" &&
				(c.LabelSelector == nil || c.LabelSelector.MatchLabels["app.kubernetes.io/instance"] != "faxgate" || c.MaxSkew != 2) {
				t.Errorf("raw constraint not rendered with tpl: %+v", c)
			}
		}
		return k
	}
	if got, want := keys(), []string{"topology.kubernetes.io/region", "topology.kubernetes.io/zone", "kubernetes.io/hostname"}; !slices.Equal(got, want) {
		t.Errorf("constraints %v, want %v", got, want)
	}
	if got, want := keys("topologySpread.enabled=false"), []string{"topology.kubernetes.io/region"}; !slices.Equal(got, want) {
		t.Errorf("topologySpread off: constraints %v, want %v", got, want)
	}
	if d := deployment(t, mustRender(t, "testdata/values/default.yaml")); d.Spec.Template.Spec.TopologySpreadConstraints != nil {
		t.Errorf("default: constraints %+v", d.Spec.Template.Spec.TopologySpreadConstraints)
	}
}

// TestChartExtraObjects: each of extraObjects, a map or a string of YAML, is
// rendered with tpl as an object of its own; none by default.
func TestChartExtraObjects(t *testing.T) {
	objs := objects(t, mustRender(t, "testdata/values/everything.yaml"))
	var cm corev1.ConfigMap
	decodeNamed(t, objs, "ConfigMap", "faxgate-extra", &cm)
	if cm.Namespace != "gateways" || cm.Data["owner"] != "platform" {
		t.Errorf("extra ConfigMap %+v", cm)
	}
	var sa corev1.ServiceAccount
	decodeNamed(t, objs, "ServiceAccount", "faxgate-reader", &sa)
	if strings.Contains(mustRender(t, "testdata/values/default.yaml"), "extra-objects.yaml") {
		t.Error("extraObjects rendered something by default")
	}
}
