package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWritesRulesWithSelectorAndOverrides(t *testing.T) {
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	// A whole chart values file: only prometheusRule's overrides count.
	os.WriteFile(values, []byte(`
replicaCount: 3
prometheusRule:
  enabled: true
  alerts:
    FaxgateCallerRateLimited: {enabled: false}
    FaxgateDown: {severity: warning}
`), 0o600)
	rules, dash := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "dash.json")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-selector", `job="fax"`, "-overrides", values, "-rules", rules, "-dashboard", dash}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, _ := os.ReadFile(rules)
	out := string(b)
	if !strings.Contains(out, `up{job="fax"}`) || strings.Contains(out, `job="faxgate"}`) || strings.Contains(out, "FaxgateCallerRateLimited") {
		t.Errorf("rules:\n%.600s", out)
	}
	if d, _ := os.ReadFile(dash); !bytes.Contains(d, []byte(`"uid": "faxgate"`)) {
		t.Errorf("dashboard:\n%.300s", d)
	}
}

func TestRefusesBadOverrides(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ file, want string }{
		"unknown alert":  {"alerts: {FaxgateDwn: {enabled: false}}", "alerts.FaxgateDwn: no such alert"},
		"misspelt key":   {"alert: {}", "field alert not found"},
		"bad severity":   {"alerts: {FaxgateDown: {severity: urgent}}", `alerts.FaxgateDown.severity: "urgent"`},
		"unparsable for": {"alerts: {FaxgateDown: {for: soon}}", `alerts.FaxgateDown.for: "soon"`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			os.WriteFile(path, []byte(tc.file), 0o600)
			var stdout, stderr bytes.Buffer
			if code := run([]string{"-overrides", path}, &stdout, &stderr); code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("wrote rules despite the error")
			}
		})
	}
}
