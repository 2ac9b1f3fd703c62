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
	"os/exec"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/pinnedtool"
)

// repoRoot is the faxgate checkout this module sits in.
const repoRoot = "../.."

// tool finds a pinned tool (pinnedtool.Find: skips loudly on a laptop,
// fails in CI).
func tool(t *testing.T, name string) string { return pinnedtool.Find(t, name) }

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
