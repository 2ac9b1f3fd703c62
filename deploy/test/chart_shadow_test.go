package deploytest

// The shadow candidate (shadowConfig): rendered beside the live file in the
// one ConfigMap, merged over config, and rolled out like config.

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/faxgate/faxgate/internal/config"
)

// renderedFiles are the live file and the shadow candidate of a render,
// decoded; cand is nil when the ConfigMap has no shadow.yaml.
func renderedFiles(t *testing.T, rendered string) (live, cand map[string]any) {
	t.Helper()
	data := configMapData(t, rendered)
	if err := yaml.Unmarshal([]byte(data["faxgate.yaml"]), &live); err != nil {
		t.Fatal(err)
	}
	if text, ok := data["shadow.yaml"]; ok {
		if err := yaml.Unmarshal([]byte(text), &cand); err != nil {
			t.Fatal(err)
		}
	}
	return live, cand
}

// TestChartShadowConfig: without shadowConfig the ConfigMap holds the live
// file alone and it names no candidate; with it, shadow.yaml sits beside
// faxgate.yaml, the live file points at it by a relative name (read from
// the live file's directory), and the candidate is the live file with
// shadowConfig's changes in the candidate's sections and nothing else:
// every other section, the keys the chart owns included, is the live
// file's, and it has no shadow section of its own.
func TestChartShadowConfig(t *testing.T) {
	rendered := mustRender(t, "testdata/values/default.yaml")
	if keys := slices.Sorted(maps.Keys(configMapData(t, rendered))); !slices.Equal(keys, []string{"faxgate.yaml"}) {
		t.Errorf("default: ConfigMap keys %v, want faxgate.yaml alone", keys)
	}
	if live, _ := renderedFiles(t, rendered); live["shadow"] != nil {
		t.Errorf("default: the live file has a shadow section: %v", live["shadow"])
	}

	live, cand := renderedFiles(t, mustRender(t, "testdata/values/everything.yaml"))
	if cand == nil {
		t.Fatal("everything: no shadow.yaml in the ConfigMap")
	}
	if got := at(live, "shadow.config_file"); got != "shadow.yaml" {
		t.Errorf("live shadow.config_file = %v, want shadow.yaml", got)
	}
	if _, ok := cand["shadow"]; ok {
		t.Errorf("the candidate has a shadow section: %v", cand["shadow"])
	}
	for section := range live {
		if section == "shadow" || slices.Contains(config.CandidateSections, section) {
			continue
		}
		if !reflect.DeepEqual(cand[section], live[section]) {
			t.Errorf("%s: candidate %v, live %v; want the live file's", section, cand[section], live[section])
		}
	}
	for path, want := range map[string]any{
		"rate_limit.default.rps":                   float64(10), // shadowConfig's
		"rate_limit.default.burst":                 float64(40), // config's, merged key by key
		"rate_limit.backend":                       "redis",     // config's
		"rate_limit.replicas_hint":                 float64(3),
		"upstream_budget.shares.intake.reserve":    0.5, // config's, beside shadowConfig's
		"upstream_budget.shares.numbers-admin.cap": 0.1,
		"upstream.proxy_auth_file":                 "/etc/faxgate/proxy-auth/proxy-auth", // owned by the chart
		"upstream.api_key_file":                    "/etc/faxgate/api-key/key",
	} {
		if got := at(cand, path); got != want {
			t.Errorf("candidate %s = %v, want %v", path, got, want)
		}
	}
	if got := at(live, "rate_limit.default.rps"); got != float64(20) {
		t.Errorf("live rate_limit.default.rps = %v, want config's 20 (shadowConfig leaked into the live file)", got)
	}
	admin := at(cand, "callers.list").([]any)[1].(map[string]any)
	if got := admin["allow"]; !reflect.DeepEqual(got, []any{"numbers.*"}) {
		t.Errorf("candidate numbers-admin allow = %v, want shadowConfig's whole list", got)
	}
}

// TestChartShadowConfigMerge: shadowConfig is merged over config a mapping
// key by key, and anything else replaces config's whole: a list (an empty
// one too), a single value, and a false or a 0 (the values that turn a
// setting off); null stays null, which faxgate reads as the key's default.
// The live file keeps config's values.
func TestChartShadowConfigMerge(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`
apiKey:
  existingSecret: faxgate-api-key
config:
  upstream:
    base_url: https://api.example.com
  upstream_budget:
    max_wait: 5s
    retry_throttled: true
    limits:
      - {name: tenant, scope: tenant, requests: 100000, per: 24h}
      - {name: per-route, scope: route, requests: 2500, per: 5m}
  policy:
    sensitive: [numbers.delete, numbers.order]
shadowConfig:
  upstream_budget:
    retry_throttled: false
    max_wait: null
    limits:
      - {name: tenant, scope: tenant, requests: 50000, per: 24h}
  policy:
    auth_endpoint: shim
    sensitive: []
  rate_limit:
    default: {burst: 0}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	live, cand := renderedFiles(t, mustRender(t, values))
	for _, tc := range []struct {
		path      string
		live, got any
	}{
		{"upstream_budget.retry_throttled", true, false},
		{"upstream_budget.max_wait", "5s", nil},
		{"policy.auth_endpoint", "deny", "shim"},
		{"policy.confirm", []any{"numbers.delete"}, []any{"numbers.delete"}},
		{"policy.sensitive", []any{"numbers.delete", "numbers.order"}, []any{}},
		{"rate_limit.default.rps", float64(20), float64(20)},
		{"rate_limit.default.burst", float64(40), float64(0)},
	} {
		if got := at(live, tc.path); !reflect.DeepEqual(got, tc.live) {
			t.Errorf("live %s = %#v, want %#v", tc.path, got, tc.live)
		}
		if got := at(cand, tc.path); !reflect.DeepEqual(got, tc.got) {
			t.Errorf("candidate %s = %#v, want %#v", tc.path, got, tc.got)
		}
	}
	if _, ok := at(cand, "upstream_budget").(map[string]any)["max_wait"]; !ok {
		t.Error("candidate upstream_budget.max_wait: null was dropped, want it kept (faxgate's default)")
	}
	if limits := at(cand, "upstream_budget.limits").([]any); len(limits) != 1 || at(limits[0].(map[string]any), "requests") != float64(50000) {
		t.Errorf("candidate limits %v, want shadowConfig's one limit (a list replaces)", limits)
	}
}

// TestChartShadowCandidateDiffers: what the chart renders for a candidate
// passes faxgate check (TestChartConfigPassesCheck loads it as check does),
// and check finds it differs from the live file in exactly the sections
// shadowConfig changes: the chart adds no difference of its own.
func TestChartShadowCandidateDiffers(t *testing.T) {
	for _, tc := range []struct {
		values string
		set    []string
		want   []string
	}{
		{"everything", nil, []string{"callers", "rate_limit", "upstream_budget"}},
		{"default", []string{"shadowConfig.policy.auth_endpoint=shim"}, []string{"policy"}},
		// The same rules as the live file: a candidate to measure the cost of.
		{"replicas-redis", []string{"shadowConfig.rate_limit.backend=redis"}, nil},
	} {
		live, cand := checkRendered(t, mustRender(t, "testdata/values/"+tc.values+".yaml", tc.set...))
		if cand == nil {
			t.Errorf("%s %v: no candidate loaded", tc.values, tc.set)
			continue
		}
		if got := config.CandidateDiffers(cand, live); !slices.Equal(got, tc.want) {
			t.Errorf("%s %v: the candidate differs in %v, want %v", tc.values, tc.set, got, tc.want)
		}
	}
}

// TestChartShadowConfigRollsThePods: a change to shadowConfig reaches the
// pods as a change to config does, both ways: the pod template's checksum
// changes (the pods roll), and the candidate is a file of the ConfigMap
// mounted as the live file's directory without subPath (kubectl edit of the
// ConfigMap reaches running pods, whose reload polls the candidate too).
func TestChartShadowConfigRollsThePods(t *testing.T) {
	sum := func(set ...string) string {
		s := deployment(t, mustRender(t, "testdata/values/default.yaml", set...)).Spec.Template.Annotations["checksum/config"]
		if len(s) != 64 {
			t.Fatalf("%v: checksum/config = %q", set, s)
		}
		return s
	}
	none := sum()
	tight := sum("shadowConfig.rate_limit.default.rps=5")
	if tight == none {
		t.Error("adding shadowConfig leaves the checksum: the pods would not roll")
	}
	if sum("shadowConfig.rate_limit.default.rps=6") == tight {
		t.Error("changing shadowConfig leaves the checksum: the pods would not roll")
	}
	if sum("shadowConfig.rate_limit.default.rps=5") != tight {
		t.Error("the checksum is not stable")
	}

	d := deployment(t, mustRender(t, "testdata/values/everything.yaml"))
	c := d.Spec.Template.Spec.Containers[0]
	if got := strings.Join(c.Args, " "); got != "serve --config /etc/faxgate/config/faxgate.yaml" {
		t.Fatalf("args %q", got)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == "config" && m.MountPath == "/etc/faxgate/config" && m.SubPath == "" {
			mounted = true
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "config" && (v.ConfigMap == nil || v.ConfigMap.Name != "faxgate" || len(v.ConfigMap.Items) != 0) {
			t.Errorf("config volume %+v, want the whole ConfigMap faxgate", v.VolumeSource)
		}
	}
	if !mounted {
		t.Errorf("the ConfigMap is not mounted whole at /etc/faxgate/config: %+v", c.VolumeMounts)
	}
}
