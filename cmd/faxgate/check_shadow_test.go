package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shadowLiveYAML is a live file naming candidate.yaml, beside it, as its
// shadow candidate.
const shadowLiveYAML = `upstream:
  base_url: "https://api.example.com"
  api_key_env: FAXGATE_API_KEY
callers:
  list:
    - name: intake
      cidrs: ["10.0.0.0/8"]
      allow: ["contacts.*"]
shadow:
  config_file: candidate.yaml
`

// shadowCandidateYAML is the live file without its shadow key: a
// candidate with the same rules.
var shadowCandidateYAML = strings.TrimSuffix(shadowLiveYAML, "shadow:\n  config_file: candidate.yaml\n")

// TestCheckShadowCandidate: check loads the candidate as it loads the live
// file, says which sections it differs in, and refuses a candidate that
// does not load, each problem with the candidate's name and YAML path;
// serve refuses to start with it.
func TestCheckShadowCandidate(t *testing.T) {
	getenv := mapEnv(map[string]string{"FAXGATE_API_KEY": secretValue})
	for _, tc := range []struct {
		name, candidate string
		code            int
		want            string // stdout, with DIR for the files' directory
	}{
		{"the same rules", shadowCandidateYAML, 0,
			"DIR/live.yaml: ok\ncandidate.yaml: ok, shadow candidate: the same rules as the live file\n"},
		{"tighter", strings.Replace(shadowCandidateYAML, `allow: ["contacts.*"]`,
			`allow: ["contacts.list"]`+"\n      rate_limit: { rps: 1, burst: 2 }", 1), 0,
			"DIR/live.yaml: ok\ncandidate.yaml: ok, shadow candidate: differs from the live file in callers\n"},
		{"a budget", shadowCandidateYAML + "upstream_budget:\n  limits:\n    - { name: tenant, scope: tenant, requests: 10, per: 1m }\n", 0,
			"DIR/live.yaml: ok\ncandidate.yaml: ok, shadow candidate: differs from the live file in upstream_budget\n"},
		{"broken", strings.Replace(shadowCandidateYAML, "10.0.0.0/8", "10.0.0/8", 1), 1,
			`DIR/candidate.yaml: callers.list[0].cidrs[0]: invalid CIDR "10.0.0/8"` + "\n"},
		{"shared limits without Redis", shadowCandidateYAML + "rate_limit:\n  backend: redis\nredis:\n  addrs: [\"127.0.0.1:6379\"]\n", 1,
			"DIR/candidate.yaml: rate_limit.backend: \"redis\" in a candidate needs the live configuration to use Redis: the candidate shares its connection\n"},
		{"a candidate of its own", shadowLiveYAML, 1, ""},
		{"missing", "", 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			live := filepath.Join(dir, "live.yaml")
			if err := os.WriteFile(live, []byte(shadowLiveYAML), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.candidate != "" {
				if err := os.WriteFile(filepath.Join(dir, "candidate.yaml"), []byte(tc.candidate), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := runCmd(t, getenv, "check", "--config", live)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if tc.want == "" { // one line naming the key and the file
				out := r.stdout + r.stderr
				if len(lines(out)) != 1 || !strings.Contains(out, "shadow.config_file") || !strings.Contains(out, "candidate.yaml") {
					t.Errorf("output %q, want one line naming shadow.config_file and the file", out)
				}
			} else if want := strings.ReplaceAll(tc.want, "DIR", dir); r.stdout != want {
				t.Errorf("stdout\n%s\nwant\n%s", r.stdout, want)
			}
			if tc.code == 0 {
				return
			}
			s := runCmd(t, getenv, "serve", "--config", live)
			if s.code != 1 || !strings.Contains(s.stderr, "candidate.yaml") {
				t.Errorf("serve: exit %d, stderr %q; want 1 naming the candidate", s.code, s.stderr)
			}
		})
	}
}
