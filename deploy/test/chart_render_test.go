package deploytest

// Rendering the chart with the real helm, and decoding what it renders.

import (
	"bytes"
	"encoding/json"
	"flag"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the chart (review the diff)")

const (
	chartDir = repoRoot + "/deploy/helm/faxgate"
	// kubeVersion is the cluster version renders assume. A helm built from
	// source defaults to v1.20, below the chart's kubeVersion (the preStop
	// sleep action needs 1.30).
	kubeVersion = "1.34.0"
)

// valueSets are testdata/values/*.yaml by name: each is linted, rendered
// against its golden file, decoded strictly and its config checked.
func valueSets(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("testdata/values/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("value sets: %v %v", files, err)
	}
	sets := map[string]string{}
	for _, f := range files {
		sets[strings.TrimSuffix(filepath.Base(f), ".yaml")] = f
	}
	return sets
}

// render is helm template of the chart with a values file and --set pairs.
func render(t *testing.T, valuesFile string, set ...string) (string, error) {
	t.Helper()
	args := []string{"template", "faxgate", chartDir, "--namespace", "gateways", "--kube-version", kubeVersion}
	if valuesFile != "" {
		args = append(args, "-f", valuesFile)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return run(t, ".", tool(t, "helm"), args...)
}

func mustRender(t *testing.T, valuesFile string, set ...string) string {
	t.Helper()
	out, err := render(t, valuesFile, set...)
	if err != nil {
		t.Fatalf("helm template %s %v: %v\n%s", valuesFile, set, err, out)
	}
	return out
}

// object is one rendered document, decoded loosely to find its kind.
type object struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	raw      []byte            // the document as JSON
}

func objects(t *testing.T, rendered string) []object {
	t.Helper()
	var objs []object
	for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(rendered, -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		var o object
		if err := json.Unmarshal(js, &o); err != nil {
			t.Fatal(err)
		}
		o.raw = js
		objs = append(objs, o)
	}
	return objs
}

// findNamed is the object of a kind with a name, or nil.
func findNamed(objs []object, kind, name string) *object {
	for i := range objs {
		if objs[i].Kind == kind && objs[i].Metadata.Name == name {
			return &objs[i]
		}
	}
	return nil
}

func find(objs []object, kind string) *object {
	for i := range objs {
		if objs[i].Kind == kind {
			return &objs[i]
		}
	}
	return nil
}

// strict decodes o into out, refusing any field the type does not have.
func (o *object) strict(out any) error {
	d := json.NewDecoder(bytes.NewReader(o.raw))
	d.DisallowUnknownFields()
	return d.Decode(out)
}

// The prometheus-operator kinds, as far as the chart renders them.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port              string          `json:"port"`
			Path              string          `json:"path"`
			Interval          string          `json:"interval"`
			ScrapeTimeout     string          `json:"scrapeTimeout"`
			Relabelings       []relabelConfig `json:"relabelings"`
			MetricRelabelings []relabelConfig `json:"metricRelabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// relabelConfig is prometheus-operator's RelabelConfig.
type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    string   `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  string   `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            ruleFile          `json:"spec"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// typed is the Kubernetes API type of each kind the chart may render.
func typed(kind string) any {
	switch kind {
	case "ServiceAccount":
		return &corev1.ServiceAccount{}
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "Service":
		return &corev1.Service{}
	case "Pod":
		return &corev1.Pod{}
	case "Deployment":
		return &appsv1.Deployment{}
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "ServiceMonitor":
		return &serviceMonitor{}
	case "PrometheusRule":
		return &prometheusRule{}
	}
	return nil
}
