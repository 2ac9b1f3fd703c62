package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// secretValue is the value of FAXGATE_API_KEY in the check tests.
const secretValue = "sk_live_Sup3rSecret-value-0042"

func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		t.Run(arg, func(t *testing.T) {
			r := runCmd(t, nil, arg)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0; stderr %q", r.code, r.stderr)
			}
			want := "faxgate " + version + " (commit " + commit + ", " + runtime.Version() + ")\n"
			if r.stdout != want {
				t.Errorf("stdout = %q, want %q", r.stdout, want)
			}
			if r.stderr != "" {
				t.Errorf("stderr = %q, want nothing", r.stderr)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // on stderr
	}{
		{"no command", nil, "usage:"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"serve without config", []string{"serve"}, "faxgate serve: --config FILE is required"},
		{"check without config", []string{"check"}, "faxgate check: --config FILE is required"},
		{"serve with empty config", []string{"serve", "--config", ""}, "--config FILE is required"},
		{"check with extra argument", []string{"check", "--config", "a.yaml", "b.yaml"}, "--config FILE is required"},
		{"serve with unknown flag", []string{"serve", "--confg", "x.yaml"}, "flag provided but not defined"},
		{"demo with extra argument", []string{"demo", "now"}, `faxgate demo: unexpected argument "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, nil, tc.args...)
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.stdout)
			}
		})
	}
	t.Run("unknown command prints usage", func(t *testing.T) {
		r := runCmd(t, nil, "frobnicate")
		for _, c := range []string{"faxgate serve --config FILE", "faxgate check --config FILE", "faxgate demo", "faxgate version"} {
			if !strings.Contains(r.stderr, c) {
				t.Errorf("usage on stderr lacks %q:\n%s", c, r.stderr)
			}
		}
	})
}

func TestCheckExample(t *testing.T) {
	// config.example.yaml names FAXGATE_API_KEY. serve cannot start without
	// it, so neither does check pass (docs/configuration.md); either way check
	// never prints the secret.
	path := filepath.Join("..", "..", "config.example.yaml")
	for _, tc := range []struct {
		name   string
		getenv func(string) (string, bool)
		code   int
		want   string
	}{
		{"without environment", nil, 1, `upstream.api_key_env: environment variable "FAXGATE_API_KEY" is not set` + "\n"},
		{"with the key set", mapEnv(map[string]string{"FAXGATE_API_KEY": secretValue}), 0, path + ": ok\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, tc.getenv, "check", "--config", path)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if r.stdout != tc.want {
				t.Errorf("stdout = %q, want %q", r.stdout, tc.want)
			}
			if strings.Contains(r.stdout+r.stderr, secretValue) {
				t.Errorf("check printed the secret")
			}
		})
	}
}

// TestCheckInvalid runs check on each testdata/invalid-*.yaml and compares
// stdout with the paired .golden: every problem, one per line, each prefixed
// by its YAML path.
func TestCheckInvalid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "invalid-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d testdata/invalid-*.yaml, want at least 4", len(files))
	}
	getenv := mapEnv(map[string]string{"FAXGATE_API_KEY": secretValue})
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(strings.TrimSuffix(f, ".yaml") + ".golden")
			if err != nil {
				t.Fatal(err)
			}
			r := runCmd(t, getenv, "check", "--config", f)
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			if r.stdout != string(want) {
				t.Errorf("stdout differs from %s.golden\ngot:\n%s\nwant:\n%s", name, r.stdout, want)
			}
			for _, l := range lines(r.stdout) {
				if path, _, ok := strings.Cut(l, ": "); !ok || strings.ContainsAny(path, " \"") {
					t.Errorf("problem line %q does not start with a YAML path", l)
				}
			}
			if strings.Contains(r.stdout+r.stderr, secretValue) {
				t.Errorf("check printed the value of FAXGATE_API_KEY:\n%s%s", r.stdout, r.stderr)
			}
		})
	}
}

// TestCheckExampleMessage pins one check message verbatim: the YAML path,
// then the problem, in the form docs/configuration.md shows.
func TestCheckExampleMessage(t *testing.T) {
	getenv := mapEnv(map[string]string{"FAXGATE_API_KEY": secretValue})
	r := runCmd(t, getenv, "check", "--config", filepath.Join("testdata", "invalid-cidr.yaml"))
	want := `callers.list[2].cidrs[0]: invalid CIDR "10.0.0/8"` + "\n"
	if r.code != 1 || r.stdout != want {
		t.Errorf("exit %d, stdout %q; want 1, %q", r.code, r.stdout, want)
	}
}

func TestCheckMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	r := runCmd(t, nil, "check", "--config", path)
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	out := r.stdout + r.stderr
	if len(lines(out)) != 1 || !strings.Contains(out, path) {
		t.Errorf("output = %q, want one line naming %s", out, path)
	}

	r = runCmd(t, nil, "serve", "--config", path)
	if r.code != 1 || r.stdout != "" || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, path) {
		t.Errorf("serve: exit %d, stdout %q, stderr %q; want 1 and one stderr line naming %s", r.code, r.stdout, r.stderr, path)
	}
}

// TestServeInvalidConfig: serve refuses a bad config with exactly one stderr
// line (the first problem and how to see the others), never the secret.
func TestServeInvalidConfig(t *testing.T) {
	getenv := mapEnv(map[string]string{"FAXGATE_API_KEY": secretValue})
	for _, tc := range []struct {
		file, want string
	}{
		{"invalid-cidr.yaml", `faxgate: invalid config testdata/invalid-cidr.yaml: callers.list[2].cidrs[0]: invalid CIDR "10.0.0/8"` + "\n"},
		{"invalid-several.yaml", `faxgate: invalid config testdata/invalid-several.yaml: server.shutdown_timeout: must be greater than 0, got "0s" (and 8 more; run faxgate check --config testdata/invalid-several.yaml)` + "\n"},
		{"invalid-secret.yaml", `faxgate: invalid config testdata/invalid-secret.yaml: server.max_body_bytes: invalid integer "${FAXGATE_API_KEY}" (and 4 more; run faxgate check --config testdata/invalid-secret.yaml)` + "\n"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r := runCmd(t, getenv, "serve", "--config", "testdata/"+tc.file)
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			if r.stderr != tc.want {
				t.Errorf("stderr = %q\nwant     %q", r.stderr, tc.want)
			}
			if r.stdout != "" || strings.Contains(r.stderr, secretValue) {
				t.Errorf("stdout %q, stderr %q: want no stdout and no secret", r.stdout, r.stderr)
			}
		})
	}
}
