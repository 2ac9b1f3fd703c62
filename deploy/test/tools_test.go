// Package deploytest tests what deploy/ ships: the Helm chart (lint, golden
// renders, strict decoding against the Kubernetes API types, its config
// through faxgate's own validation), the alert rules (promtool) and the
// dashboard (every query parsed, every metric one faxgate exports). It is a
// module of its own so that the Kubernetes and Prometheus libraries never
// reach faxgate's go.mod.
package deploytest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// repoRoot is the faxgate checkout this module sits in.
const repoRoot = "../.."

// tool finds a pinned tool: on PATH, else where .ci/install-tools caches it.
// A missing tool skips the test loudly on a laptop and fails it in CI.
func tool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache")
		}
	}
	if p := filepath.Join(cache, "faxgate-tools", "bin", name); cache != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "\n\n*** " + name + " is not installed: run .ci/install-tools (it builds the pinned version) ***\n\n"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// run runs a tool with a time bound and returns its combined output.
func run(t *testing.T, dir, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
