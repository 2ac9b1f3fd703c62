package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckShadowCandidate: check takes a shadow candidate
// (shadow.config_file) as it takes the live file, each problem prefixed by
// the candidate's file name, and says in which sections a good candidate
// differs from the live file. The lines are the ones
// docs/configuration.md quotes.
func TestCheckShadowCandidate(t *testing.T) {
	const live = `upstream:
  base_url: "https://api.example.com"
  api_key_env: FAXGATE_API_KEY
callers:
  list:
    - name: intake
      cidrs: ["10.20.0.0/16"]
      allow: ["contacts.*"]
      rate_limit: { rps: 50, burst: 100 }
`
	for _, tc := range []struct {
		name      string
		candidate string // "" writes no candidate file
		code      int
		want      string // stdout; {dir} is the files' directory
	}{
		{"the same rules", live, 0,
			"{dir}/config.yaml: ok\ncandidate.yaml: ok, shadow candidate: the same rules as the live file\n"},
		{"a tighter rate limit and a default", strings.Replace(live, "rps: 50, burst: 100", "rps: 5, burst: 10", 1) +
			"rate_limit:\n  default: { rps: 10, burst: 20 }\n", 0,
			"{dir}/config.yaml: ok\ncandidate.yaml: ok, shadow candidate: differs from the live file in callers, rate_limit\n"},
		{"a broken candidate", strings.Replace(strings.Replace(live, "rps: 50", "rps: 0", 1), `"contacts.*"`, `"contact.*"`, 1), 1,
			`{dir}/candidate.yaml: callers.list[0].allow[0]: "contact.*" matches no route` + "\n" +
				`{dir}/candidate.yaml: callers.list[0].rate_limit.rps: must be greater than 0, got "0"` + "\n"},
		{"a candidate sharing limits through Redis", live + "rate_limit:\n  backend: redis\n", 1,
			`{dir}/candidate.yaml: rate_limit.backend: "redis" in a candidate needs the live configuration to use Redis: the candidate shares its connection` + "\n"},
		{"no candidate file", "", 1,
			`shadow.config_file: cannot read the candidate "{dir}/candidate.yaml": open {dir}/candidate.yaml: no such file or directory` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.yaml")
			if err := os.WriteFile(path, []byte(live+"shadow:\n  config_file: candidate.yaml\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.candidate != "" {
				if err := os.WriteFile(filepath.Join(dir, "candidate.yaml"), []byte(tc.candidate), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := runCmd(t, mapEnv(map[string]string{"FAXGATE_API_KEY": secretValue}), "check", "--config", path)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d", r.code, tc.code)
			}
			if want := strings.ReplaceAll(tc.want, "{dir}", dir); r.stdout != want {
				t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
			}
			if strings.Contains(r.stdout+r.stderr, secretValue) {
				t.Errorf("check printed the secret")
			}
		})
	}
}
