package deploytest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/deploy/test/chartreadme"
)

// TestChartREADMEIsCurrent: deploy/helm/faxgate/README.md is what
// chartreadme makes of Chart.yaml and values.yaml. Run with -update to
// rewrite it, then review the diff.
func TestChartREADMEIsCurrent(t *testing.T) {
	chartYAML, err1 := os.ReadFile(chartDir + "/Chart.yaml")
	valuesYAML, err2 := os.ReadFile(chartDir + "/values.yaml")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	got, err := chartreadme.Generate(chartYAML, valuesYAML)
	if err != nil {
		t.Fatal(err)
	}
	path := chartDir + "/README.md"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run %s)", err, chartreadme.RegenerateCommand)
	}
	if string(got) != string(want) {
		t.Errorf("%s is stale (run %s, then review git diff):\n%s", path, chartreadme.RegenerateCommand, firstDiff(string(want), string(got)))
	}
}

// TestChartREADMEListsEveryValue: every value the schema accepts at the top
// level has a row (a key or the prefix of keys), so a value added to the
// schema without a documented default in values.yaml fails here.
func TestChartREADMEListsEveryValue(t *testing.T) {
	valuesYAML, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chartreadme.Rows(valuesYAML)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(chartDir + "/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	for name := range schema.Properties {
		if name == "global" { // Helm's own, for subcharts
			continue
		}
		found := false
		for _, r := range rows {
			if r.Key == name || strings.HasPrefix(r.Key, name+".") {
				found = true
			}
			if r.Description == "" {
				t.Errorf("%s: no description", r.Key)
			}
		}
		if !found {
			t.Errorf("the schema's %s has no row in the README: document it in values.yaml", name)
		}
	}
}
