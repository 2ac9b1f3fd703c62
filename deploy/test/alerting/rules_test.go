//go:build alerting

package alerting

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// shortFor is every alert's for: in the event tests' copy of the rules.
const shortFor = "5s"

// renderRules renders the chart's PrometheusRule for r with helm template
// (as a user installs it: the ServiceMonitor and the PrometheusRule on) and
// writes its spec.groups as a Prometheus rules file, every for: shortened
// when short is set. It returns the file's path.
func renderRules(t *testing.T, helm, dir string, r *release, short bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, "template", r.name, filepath.Join(repoRoot, "deploy/helm/faxgate"),
		"--namespace", r.namespace,
		"--set", "prometheusRule.enabled=true",
		"--set", "serviceMonitor.enabled=true",
		"--set", "apiKey.existingSecret="+r.name+"-api-key",
		"--set", "config.upstream.base_url=https://api.example.com")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", r.name, err, stderr.String())
	}
	groups, err := ruleGroups(out)
	if err != nil {
		t.Fatalf("helm template %s: %v", r.name, err)
	}
	// The rules must select this release's job and namespace, or nothing
	// fires, or the other release's series fire them too.
	if sel := `job="` + r.fullname + `",namespace="` + r.namespace + `"`; !strings.Contains(string(mustYAML(t, groups)), sel) {
		t.Fatalf("the chart's rules for release %s in %s never select %s", r.name, r.namespace, sel)
	}
	if short {
		for _, g := range groups {
			rules, _ := g["rules"].([]any)
			for _, rule := range rules {
				if m, ok := rule.(map[string]any); ok && m["for"] != nil {
					m["for"] = shortFor
				}
			}
		}
	}
	path := filepath.Join(dir, r.namespace+".rules.yaml")
	writeFile(t, path, string(mustYAML(t, map[string]any{"groups": groups})))
	return path
}

// ruleGroups finds the PrometheusRule in a multi-document render and returns
// its spec.groups.
func ruleGroups(render []byte) ([]map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(render))
	for {
		var doc struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Groups []map[string]any `yaml:"groups"`
			} `yaml:"spec"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil, errors.New("no PrometheusRule in the render")
		}
		if err != nil {
			return nil, err
		}
		if doc.Kind == "PrometheusRule" {
			if len(doc.Spec.Groups) == 0 {
				return nil, errors.New("the PrometheusRule has no groups")
			}
			return doc.Spec.Groups, nil
		}
	}
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
