package chartreadme

import (
	"strings"
	"testing"
)

func TestRows(t *testing.T) {
	values := `# Header, not a description.

# -- (int) Pods. Continued
# on a second line.
replicaCount: 1
image:
  #  - an example left in a comment
  # -- The tag.
  tag: ""
apiKey:
  # apiKey.existingSecret -- (string) The Secret.
  # @default -- none (required)
  # -- Key inside it.
  key: api-key
# -- A documented map: one row, its keys only when documented.
config:
  server: {listen: ":8080"}
  # -- The log level.
  log: info
`
	rows, err := Rows([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Key+" | "+r.Type+" | "+r.Default+" | "+r.Description)
	}
	want := []string{
		"replicaCount | int | `1` | Pods. Continued on a second line.",
		"image.tag | string | `\"\"` | The tag.",
		"apiKey.existingSecret | string | none (required) | The Secret.",
		"apiKey.key | string | `\"api-key\"` | Key inside it.",
		"config | object | `{\"log\":\"info\",\"server\":{\"listen\":\":8080\"}}` | A documented map: one row, its keys only when documented.",
		"config.log | string | `\"info\"` | The log level.",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRowsRefuse(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"an undocumented leaf", "image:\n  # a plain comment\n  tag: x\n", "line 3: image.tag has no \"# -- description\" comment"},
		{"a null with no type", "# -- Grace.\ngrace: null\n", "line 2: grace defaults to null: name its type"},
		{"an absent value with no type", "a:\n  # a.b -- B.\n  # -- C.\n  c: 1\n", "line 2: a.b is not in values.yaml: name its type"},
		{"a description apart from its key", "# -- Detached.\n\nx: 1\n", "line 3: x has no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Rows([]byte(tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestGenerateEscapesCells(t *testing.T) {
	out, err := Generate([]byte("name: c\nversion: 1.0.0\n"), []byte("# -- On <fullname>-metrics | not a new cell.\nport: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "| On &lt;fullname&gt;-metrics \\| not a new cell. |") {
		t.Errorf("row not escaped:\n%s", out)
	}
}
