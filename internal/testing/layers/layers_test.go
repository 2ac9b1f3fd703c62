// Package layers holds the test of the package layering that
// docs/architecture.md draws: a package imports only packages of its own
// layer or of a lower one.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/faxgate/faxgate"

// layers lists the module's packages from the bottom up, by path prefix
// (a prefix names the package and every package below its folder; the
// longest prefix that names a package decides, so policy/routetable is in
// layer 0 while the rest of policy is higher). The order is
// docs/architecture.md's picture; change both together.
var layers = [][]string{
	{"internal/base", "internal/config", "policy/routetable"},
	{"metrics", "deploy/mixin"},
	{"policy", "tokencache", "internal/certstore"},
	{"proxy", "internal/servertls"},
	{"internal/app"},
	{"cmd"},
}

// testSupport may import any package, and only tests import it.
const testSupport = "internal/testing"

// layerOf returns the layer of a package path relative to the module, by
// the longest prefix that names it, or -1 when none does.
func layerOf(rel string) int {
	layer, longest := -1, 0
	for i, l := range layers {
		for _, p := range l {
			if (rel == p || strings.HasPrefix(rel, p+"/")) && len(p) > longest {
				layer, longest = i, len(p)
			}
		}
	}
	return layer
}

func TestNoImportRunsUpward(t *testing.T) {
	// The non-test imports of every package of the module (go list's
	// Imports leaves out test files' imports: tests may reach up).
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module+"/")
		if pkg == testSupport || strings.HasPrefix(pkg, testSupport+"/") {
			continue
		}
		from := layerOf(pkg)
		if from < 0 {
			t.Errorf("package %s is in no layer: add it to layers here and to docs/architecture.md", pkg)
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if rel == testSupport || strings.HasPrefix(rel, testSupport+"/") {
				t.Errorf("%s imports test support %s", pkg, rel)
				continue
			}
			if to := layerOf(rel); to > from {
				t.Errorf("%s (layer %d, %v) imports %s of a higher layer (%d, %v)", pkg, from, layers[from], rel, to, layers[to])
			}
		}
	}
	if checked < 15 {
		t.Fatalf("checked %d packages: go list found too few", checked)
	}
}

// The check itself: an upward import is caught, whatever its spelling.
func TestLayerOf(t *testing.T) {
	for _, c := range []struct {
		pkg  string
		want int
	}{
		{"internal/base/clock", 0},
		{"internal/config", 0},
		{"internal/configx", -1},
		{"metrics", 1},
		{"policy", 2},
		{"policy/limit", 2},
		{"policy/routetable", 0},
		{"policy/routetable/x", 0},
		{"policy/routetablex", 2},
		{"proxy/listener", 3},
		{"internal/app/gateway", 4},
		{"cmd/faxgate", 5},
	} {
		if got := layerOf(c.pkg); got != c.want {
			t.Errorf("layerOf(%q) = %d, want %d", c.pkg, got, c.want)
		}
	}
}

// TestGatewayLinksNoTemplateEngine: the gateway binary links neither Go
// template package nor gRPC. A template calls methods by name through
// reflect, and a binary that can do that keeps every exported method of
// every type: with go-redis linked, the executable grew from 25 to 40 MB
// and its resident pages by about 2 MiB (docs/performance.md, Memory).
func TestGatewayLinksNoTemplateEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/faxgate").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "text/template" || pkg == "html/template" || strings.HasPrefix(pkg, "google.golang.org/grpc") {
			t.Errorf("cmd/faxgate links %s", pkg)
		}
	}
}
