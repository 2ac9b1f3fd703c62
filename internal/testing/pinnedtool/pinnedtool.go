// Package pinnedtool finds the pinned tools that .ci/install-tools builds
// (helm, promtool, prometheus, alertmanager, jaeger) for the tests that run
// them (docs/development.md, CI).
package pinnedtool

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Find returns the path of tool name: on PATH, else in
// ${XDG_CACHE_HOME:-~/.cache}/faxgate-tools/bin, where .ci/install-tools
// caches it. Without it the test skips with a loud message on a laptop, and
// fails when CI=true.
func Find(t testing.TB, name string) string {
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
	if cache != "" {
		p := filepath.Join(cache, "faxgate-tools", "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "\n\n*** " + name + " is not installed: run .ci/install-tools (it builds the pinned version into ~/.cache/faxgate-tools/bin) ***\n\n"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
