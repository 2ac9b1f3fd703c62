package config

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output (review the diff!)")

// testSecret is the value of FAXGATE_TEST_SECRET; it must never appear in a
// problem.
const testSecret = "s3cr3t-Hunter2-do-not-print"

// testEnv is the environment of the golden tests.
func testEnv(name string) (string, bool) {
	v, ok := map[string]string{
		"FAXGATE_TEST_SECRET": testSecret,
		"FAXGATE_TEST_URL":    "https://api.example.com",
		"FAXGATE_TIMEOUT":     "5s",
		"A":                   "10.9.",
		"B":                   "0.0/16",
	}[name]
	return v, ok
}

// TestInvalidGolden parses each testdata/invalid-*.yaml and compares the
// problems, as an operator sees them, with the paired .golden file.
func TestInvalidGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 15 {
		t.Fatalf("found %d invalid-*.yaml files, want at least 15", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(f, testEnv)
			if cfg != nil {
				t.Errorf("Load returned a config for an invalid file")
			}
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Load error = %v (%T), want Problems", err, err)
			}
			got := ps.Error() + "\n"
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("problems differ from %s\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
			if strings.Contains(got, testSecret) {
				t.Errorf("problems print the value of an environment variable:\n%s", got)
			}
		})
	}
}

// TestLoadExampleMessage pins one exact message: the YAML path, then the
// problem, in the form docs/configuration.md shows.
func TestLoadExampleMessage(t *testing.T) {
	_, err := Load("testdata/invalid-cidr.yaml", nil)
	want := `callers.list[2].cidrs[0]: invalid CIDR "10.0.0/8"`
	if err == nil || !strings.Contains(err.Error()+"\n", want+"\n") {
		t.Errorf("error = %v, want a line %q", err, want)
	}
}

// TestExampleConfig keeps config.example.yaml valid, complete and honest
// about the defaults.
func TestExampleConfig(t *testing.T) {
	const path = "../../config.example.yaml"
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatalf("config.example.yaml is invalid:\n%v", err)
	}

	// Every value the example does not deliberately change is the default.
	want := Default()
	want.Upstream.BaseURL = "https://api.example.com"
	want.Upstream.APIKeyEnv = "FAXGATE_API_KEY"
	want.Callers.TrustedProxies = cfg.Callers.TrustedProxies
	want.Callers.List = cfg.Callers.List
	want.Routes.Extra = cfg.Routes.Extra
	want.UpstreamBudget.Limits = cfg.UpstreamBudget.Limits
	want.UpstreamBudget.Shares = cfg.UpstreamBudget.Shares
	normalizeEmpty(reflect.ValueOf(cfg).Elem())
	normalizeEmpty(reflect.ValueOf(&want).Elem())
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("config.example.yaml shows values other than the defaults:\n got %+v\nwant %+v", *cfg, want)
	}
	if len(cfg.Callers.List) < 2 || len(cfg.Routes.Extra) == 0 {
		t.Errorf("config.example.yaml should show callers and extra routes")
	}
	if len(cfg.UpstreamBudget.Limits) < 2 || len(cfg.UpstreamBudget.Shares) < 2 {
		t.Errorf("config.example.yaml should show the vendor's limits and a reserve and a cap")
	}

	// Every key of the types appears in the example.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	collectKeys(doc.Content[0], "", have)
	for _, k := range typeKeys(reflect.TypeOf(Config{}), "") {
		if !have[k] {
			t.Errorf("config.example.yaml does not show %s", k)
		}
	}
}

// normalizeEmpty turns empty slices into nil so that "[]" in a file
// compares equal to an absent list.
func normalizeEmpty(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			normalizeEmpty(v.Field(i))
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.SetZero()
		}
		for i := range v.Len() {
			normalizeEmpty(v.Index(i))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			normalizeEmpty(v.Elem())
		}
	}
}

// collectKeys records every key path in n, list elements as "[]".
func collectKeys(n *yaml.Node, path string, have map[string]bool) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := joinPath(path, n.Content[i].Value)
			have[p] = true
			collectKeys(n.Content[i+1], p, have)
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			collectKeys(e, path+"[]", have)
		}
	}
}

// typeKeys lists every key path of struct type t, list elements as "[]".
func typeKeys(t reflect.Type, path string) []string {
	var keys []string
	for name, i := range yamlFields(t) {
		p := joinPath(path, name)
		keys = append(keys, p)
		ft := t.Field(i).Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			keys = append(keys, typeKeys(ft.Elem(), p+"[]")...)
		} else if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Duration(0)) {
			keys = append(keys, typeKeys(ft, p)...)
		}
	}
	return keys
}

// TestDefaults checks that a file with only the required keys decodes to
// Default().
func TestDefaults(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"minimal", "upstream:\n  base_url: https://api.example.com\n  api_key_env: FAXGATE_API_KEY\n"},
		// A section whose keys are all commented out is empty, not an error.
		{"empty sections", "server:\n  tls:\nadmin:\nupstream:\n  base_url: https://api.example.com\n  api_key_env: FAXGATE_API_KEY\nlog:\n"},
		{"from env", "upstream:\n  base_url: ${FAXGATE_TEST_URL}\n  api_key_env: FAXGATE_API_KEY\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.file), testEnv)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := Default()
			want.Upstream.BaseURL = "https://api.example.com"
			want.Upstream.APIKeyEnv = "FAXGATE_API_KEY"
			if !reflect.DeepEqual(*cfg, want) {
				t.Errorf("got  %+v\nwant %+v", *cfg, want)
			}
		})
	}
}

// TestDecode checks how values in the file land on top of the defaults.
func TestDecode(t *testing.T) {
	const base = "upstream:\n  base_url: https://api.example.com\n  api_key_env: FAXGATE_API_KEY\n"
	for _, tc := range []struct {
		name, file string
		check      func(c *Config) bool
	}{
		{"empty list replaces default", "policy:\n  sensitive: []\n",
			func(c *Config) bool { return len(c.Policy.Sensitive) == 0 && len(c.Policy.Confirm) == 1 }},
		{"null list clears", "policy:\n  confirm:\n",
			func(c *Config) bool { return c.Policy.Confirm == nil && len(c.Policy.Sensitive) == 1 }},
		{"list replaces, not appends", "redis:\n  addrs: [\"r1:6379\", \"r2:6379\"]\n",
			func(c *Config) bool { return reflect.DeepEqual(c.Redis.Addrs, []string{"r1:6379", "r2:6379"}) }},
		{"untouched sibling keeps default", "server:\n  listen: \":8443\"\n",
			func(c *Config) bool { return c.Server.Listen == ":8443" && c.Server.IdleTimeout == 120*time.Second }},
		{"duration from env", "token:\n  retry_min: \"${FAXGATE_TIMEOUT}\"\n",
			func(c *Config) bool { return c.Token.RetryMin == 5*time.Second }},
		{"int forms", "server:\n  max_body_bytes: 0x100\nredis:\n  db: 010\n",
			func(c *Config) bool { return c.Server.MaxBodyBytes == 256 && c.Redis.DB == 10 }},
		{"caller rate limit starts empty", "callers:\n  list:\n    - name: a\n      cidrs: [\"10.0.0.0/8\"]\n      rate_limit: {rps: 2.5, burst: 3}\n",
			func(c *Config) bool {
				return len(c.Callers.List) == 1 && *c.Callers.List[0].RateLimit == Limit{RPS: 2.5, Burst: 3}
			}},
		{"literal dollar", "redis:\n  key_prefix: \"fg$$:$x\"\n",
			func(c *Config) bool { return c.Redis.KeyPrefix == "fg$:$x" }},
		{"anchor under an unknown key", "x: &p \"fg:\"\nredis:\n  key_prefix: *p\n", nil},
		{"alias", "callers:\n  list:\n    - {name: a, cidrs: [\"10.1.0.0/16\"], allow: &al [\"contacts.*\"]}\n    - {name: b, cidrs: [\"10.2.0.0/16\"], allow: *al}\n",
			func(c *Config) bool { return reflect.DeepEqual(c.Callers.List[1].Allow, []string{"contacts.*"}) }},
		{"bool", "admin:\n  pprof: true\nredis:\n  tls: False\n",
			func(c *Config) bool { return c.Admin.Pprof && !c.Redis.TLS }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(base+tc.file), testEnv)
			if tc.check == nil {
				if err == nil {
					t.Fatalf("Parse succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !tc.check(cfg) {
				t.Errorf("unexpected config %+v", *cfg)
			}
		})
	}
}

func TestLoadUnreadable(t *testing.T) {
	cfg, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	if cfg != nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load = %v, %v; want nil and a not-exist error", cfg, err)
	}
	var ps Problems
	if errors.As(err, &ps) {
		t.Errorf("an unreadable file is reported as Problems: %v", err)
	}
}

// TestSecretNeverPrinted references a secret-looking variable wherever a
// message quotes a value and checks that only ${NAME} is shown.
func TestSecretNeverPrinted(t *testing.T) {
	const secret = "hunter2-Zq9xVbT4"
	env := func(n string) (string, bool) {
		if n == "SECRET" {
			return secret, true
		}
		return "", false
	}
	file := `
server:
  listen: "${SECRET}"
  read_header_timeout: "${SECRET}"
  tls: { mode: "${SECRET}", cert_file: "x" }
admin:
  listen: "${SECRET}"
  pprof: "${SECRET}"
upstream:
  base_url: "https://u:${SECRET}@x"
  api_key_env: "${SECRET}"
  max_idle_conns: "${SECRET}"
token:
  store: "${SECRET}"
redis:
  addrs: ["${SECRET}"]
  password_env: "${SECRET}"
callers:
  unidentified: "${SECRET}"
  list:
    - name: "${SECRET}"
      cidrs: ["${SECRET}"]
      header_values: ["${SECRET} "]
      spiffe_ids: ["${SECRET}"]
      allow: ["${SECRET}"]
      rate_limit: { rps: "${SECRET}", burst: "${SECRET}" }
routes:
  unmatched: "${SECRET}"
  extra: [{ name: "${SECRET}", method: "${SECRET}", path: "${SECRET}" }]
policy:
  sensitive: ["${SECRET}"]
log:
  level: "${SECRET}"
`
	_, err := Parse([]byte(file), env)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Parse error = %v, want Problems", err)
	}
	if len(ps) < 20 {
		t.Errorf("only %d problems; the test no longer exercises the messages:\n%v", len(ps), err)
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a message prints the secret:\n%v", err)
	}
	if !strings.Contains(err.Error(), `admin.listen: invalid address "${SECRET}"`) {
		t.Errorf("messages should quote ${SECRET} as written:\n%v", err)
	}
}

func TestProblemString(t *testing.T) {
	ps := Problems{{Path: "a.b[0]", Message: "bad"}, {Message: "whole file"}}
	if got, want := ps.Error(), "a.b[0]: bad\nwhole file"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// FuzzParse checks that no file makes Parse panic, return anything but a
// config or Problems, or print a value that came from the environment.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/invalid-*.yaml")
	for _, name := range append(files, "../../config.example.yaml") {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("upstream: {base_url: \"${U}\", api_key_env: K}\nadmin: {listen: \"${L}\"}\n")) // everything from env
	f.Add([]byte("a: &a [*a]\n"))                                                                // a recursive alias
	const secret = "ZQX-secret-XQZ"
	getenv := func(string) (string, bool) { return secret, true }
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, getenv)
		if err == nil {
			if cfg == nil {
				t.Fatal("Parse returned neither a config nor an error")
			}
			if ps := Validate(cfg); ps != nil {
				t.Fatalf("Parse accepted a config Validate rejects: %v", ps)
			}
			return
		}
		var ps Problems
		if cfg != nil || !errors.As(err, &ps) || len(ps) == 0 {
			t.Fatalf("Parse = %v, %v (%T); want nil and Problems", cfg, err, err)
		}
		if !strings.Contains(string(data), "ZQX") && strings.Contains(err.Error(), "ZQX") {
			t.Fatalf("a problem prints the environment's value:\n%v", err)
		}
	})
}
