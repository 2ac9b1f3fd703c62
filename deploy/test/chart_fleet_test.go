package deploytest

// The chart on a shared platform: every key faxgate takes, several pods as
// one fleet, the admin listener's names, and two releases of one name in two
// namespaces.

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/deploy/mixin"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/faxgate/faxgate/internal/config"
)

// renderedConfig is the faxgate.yaml of the rendered ConfigMap.
func renderedConfig(t *testing.T, rendered string) map[string]any {
	t.Helper()
	var cm corev1.ConfigMap
	for _, o := range objects(t, rendered) {
		if o.Kind == "ConfigMap" && !strings.HasSuffix(o.Metadata.Name, "-dashboard") && !strings.HasSuffix(o.Metadata.Name, "-extra") {
			if err := o.strict(&cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal([]byte(cm.Data["faxgate.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// at is the value at a dotted path of a decoded YAML document.
func at(doc map[string]any, path string) any {
	var v any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// TestChartTakesTheExampleConfig: config.example.yaml, the file the docs
// start from, goes through the chart as it is (but for the keys the chart
// owns, which the schema names), and what the chart renders from it passes
// faxgate's own validation. Regression: the schema refused tracing, and with
// it docs/tracing.md's own example.
func TestChartTakesTheExampleConfig(t *testing.T) {
	b, err := os.ReadFile(repoRoot + "/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	// The keys the chart owns: the schema refuses each one with a message
	// naming it (TestChartRefusesBadValues); here they are left out.
	for _, owned := range mixin.ChartOwned() {
		i := strings.LastIndex(owned, ".")
		parent, key := owned[:i], owned[i+1:]
		if m, ok := at(cfg, parent).(map[string]any); ok {
			delete(m, key)
		}
	}
	values := map[string]any{"apiKey": map[string]any{"existingSecret": "k"}, "config": cfg}
	if at(cfg, "token.store") == "redis" || at(cfg, "rate_limit.backend") == "redis" {
		values["replicaCount"] = 2
	}
	path := filepath.Join(t.TempDir(), "values.yaml")
	vb, _ := yaml.Marshal(values)
	if err := os.WriteFile(path, vb, 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustRender(t, path)
	got := renderedConfig(t, out)
	for _, section := range []string{"tracing", "upstream_budget", "callers", "routes"} {
		if _, inExample := cfg[section]; inExample && got[section] == nil {
			t.Errorf("config.example.yaml's %s did not reach the rendered config", section)
		}
	}
}

// TestChartSchemaTakesEveryKey: a config that sets every key of faxgate's
// configuration types (built here from the types themselves, so a key added
// tomorrow is in it), and a shadowConfig that sets every key of the
// candidate's sections, pass the chart's schema; so does each scalar
// written as ${NAME}, which faxgate expands before it reads the value.
func TestChartSchemaTakesEveryKey(t *testing.T) {
	owned := map[string]bool{}
	for _, k := range mixin.ChartOwned() {
		owned[k] = true
	}
	for _, fromEnv := range []bool{false, true} {
		t.Run(fmt.Sprintf("fromEnv=%v", fromEnv), func(t *testing.T) {
			n := 0
			doc := fill(reflect.TypeOf(config.Config{}), "", owned, fromEnv, &n)
			doc.(map[string]any)["upstream"].(map[string]any)["base_url"] = "https://api.example.com"
			// The candidate's sections, every key of them, as a shadowConfig.
			shadow := map[string]any{}
			for _, section := range config.CandidateSections {
				shadow[section] = doc.(map[string]any)[section]
			}
			values := map[string]any{"apiKey": map[string]any{"existingSecret": "k"}, "config": doc, "shadowConfig": shadow, "replicaCount": 2}
			path := filepath.Join(t.TempDir(), "values.yaml")
			vb, _ := yaml.Marshal(values)
			if err := os.WriteFile(path, vb, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := render(t, path); err != nil {
				t.Fatalf("the schema refuses a config with all %d keys: %v\n%s", n, err, out)
			}
			if n < 60 {
				t.Errorf("only %d keys filled", n)
			}
		})
	}
}

// fill builds a value of type t with every key set: a value of the kind the
// decoder reads, or "${NAME}" for each scalar with fromEnv. Keys the chart
// owns are left out; token.store and rate_limit.backend are redis (two pods).
func fill(t reflect.Type, path string, owned map[string]bool, fromEnv bool, n *int) any {
	switch path {
	case "redis.mode":
		*n++
		return "auto"
	case "token.store", "rate_limit.backend":
		*n++
		return "redis"
	}
	if t == reflect.TypeOf(time.Duration(0)) {
		*n++
		if fromEnv {
			return "${FAXGATE_D}"
		}
		return "90s"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return fill(t.Elem(), path, owned, fromEnv, n)
	case reflect.Struct:
		m := map[string]any{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			p := name
			if path != "" {
				p = path + "." + name
			}
			if !f.IsExported() || name == "" || name == "-" || owned[p] {
				continue
			}
			m[name] = fill(f.Type, p, owned, fromEnv, n)
		}
		return m
	case reflect.Slice:
		return []any{fill(t.Elem(), path+"[]", owned, fromEnv, n)}
	case reflect.Map:
		return map[string]any{"intake": fill(t.Elem(), path+".*", owned, fromEnv, n)}
	}
	*n++
	if fromEnv {
		return "${FAXGATE_X}"
	}
	switch t.Kind() {
	case reflect.Bool:
		return true
	case reflect.Int, reflect.Int64:
		return 3
	case reflect.Float64:
		return 0.5
	}
	return "a"
}

// TestChartSeveralPodsShareOneFleet: the chart sets rate_limit.replicas_hint
// to the most pods that can run (replicaCount, or maxReplicas with the
// autoscaler) unless config sets it, so that a pod that loses Redis limits
// at its share; the schema refuses a second pod without Redis
// (TestChartRefusesBadValues). Regression: replicaCount 3 rendered
// backend: local with replicas_hint 1, and the fleet sent three times the
// vendor's budget.
func TestChartSeveralPodsShareOneFleet(t *testing.T) {
	for _, tc := range []struct {
		values string
		set    []string
		want   float64
	}{
		{"default", nil, 1},
		{"replicas-redis", nil, 3},
		{"hpa-redis", nil, 4},
		{"everything", nil, 3}, // config says 3, though the autoscaler may run 12
		{"replicas-redis", []string{"replicaCount=5"}, 5},
	} {
		cfg := renderedConfig(t, mustRender(t, "testdata/values/"+tc.values+".yaml", tc.set...))
		if got := at(cfg, "rate_limit.replicas_hint"); got != tc.want {
			t.Errorf("%s %v: replicas_hint %v, want %v", tc.values, tc.set, got, tc.want)
		}
		if tc.values != "default" && (at(cfg, "token.store") != "redis" || at(cfg, "rate_limit.backend") != "redis") {
			t.Errorf("%s: token.store %v, rate_limit.backend %v", tc.values, at(cfg, "token.store"), at(cfg, "rate_limit.backend"))
		}
	}
}

// TestChartAdminAllowedHosts: the admin listener answers IP literals and
// localhost by itself; the chart adds the metrics Service's in-cluster names
// (helm test and other clients in the cluster use them; Prometheus scrapes
// pods by IP), the cluster domain from clusterDomain, and keeps the names
// config lists.
func TestChartAdminAllowedHosts(t *testing.T) {
	names := func(values string, set ...string) []string {
		var out []string
		for _, v := range at(renderedConfig(t, mustRender(t, values, set...)), "admin.allowed_hosts").([]any) {
			out = append(out, v.(string))
		}
		return out
	}
	own := []string{"faxgate-metrics", "faxgate-metrics.gateways", "faxgate-metrics.gateways.svc", "faxgate-metrics.gateways.svc.cluster.local"}
	if got := names("testdata/values/default.yaml"); !slices.Equal(got, own) {
		t.Errorf("default: %q, want %q", got, own)
	}
	if got, want := names("testdata/values/everything.yaml"), append(slices.Clone(own), "faxgate-status.example.com"); !slices.Equal(got, want) {
		t.Errorf("with config's own: %q, want %q", got, want)
	}
	got := names("testdata/values/default.yaml", "clusterDomain=corp.example.", "fullnameOverride=fax-gw",
		"config.admin.allowed_hosts[0]=fax-gw-metrics", "config.admin.allowed_hosts[1]=status.example.com")
	want := []string{"fax-gw-metrics", "fax-gw-metrics.gateways", "fax-gw-metrics.gateways.svc", "fax-gw-metrics.gateways.svc.corp.example", "status.example.com"}
	if !slices.Equal(got, want) {
		t.Errorf("cluster domain, full name and a duplicate: %q, want %q", got, want)
	}
}

// TestChartTakesTheTracingExample: the "With Helm" example of
// docs/tracing.md renders, with the API key and base URL every install
// needs. Regression: the schema refused config.tracing.
func TestChartTakesTheTracingExample(t *testing.T) {
	b, err := os.ReadFile(repoRoot + "/docs/tracing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "## With Helm")
	_, block, ok2 := strings.Cut(after, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/tracing.md has no yaml block under \"## With Helm\"")
	}
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustRender(t, path, "apiKey.existingSecret=k", "config.upstream.base_url=https://api.example.com", "networkPolicy.enabled=true",
		"networkPolicy.callers[0].podSelector.matchLabels.app=intake")
	if at(renderedConfig(t, out), "tracing.endpoint") != "http://otel-collector.observability:4318" {
		t.Errorf("the tracing section did not reach the rendered config")
	}
}
