// Package chartreadme writes the Helm chart's README.md from its Chart.yaml
// and the helm-docs style comments of its values.yaml, so that the list of
// values, their defaults and descriptions cannot drift from the chart.
//
// A value is documented by the comment block right above its key, from its
// last line starting "# --" to the key:
//
//	# -- (int) Pods to run when autoscaling is off. Continuation lines
//	# follow; "(type)" is optional and needed only for a null default.
//	# @default -- text shown instead of the default
//	replicaCount: 1
//
// A value absent from values.yaml (a required one with no default) is
// documented anywhere by "# path.to.value -- description". A documented map
// is one row with its whole default; its keys get rows only when they are
// documented themselves. A leaf that is neither documented nor inside a
// documented map is an error: every value is listed.
package chartreadme

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// RegenerateCommand is how the README is rewritten; the README says so.
const RegenerateCommand = "cd deploy/test && go test -run TestChartREADMEIsCurrent -update ."

var (
	descStart = regexp.MustCompile(`^#\s*--\s?(.*)$`)
	pathStart = regexp.MustCompile(`^#\s*([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+)\s+--\s?(.*)$`)
	typeTag   = regexp.MustCompile(`^\(([a-z]+)\)\s*`)
	defaultAt = regexp.MustCompile(`^@default\s+--\s?(.*)$`)
)

// Row is one value of the chart.
type Row struct {
	Key, Type, Default, Description string
	line                            int // where it is documented, for the order
}

// chartMeta is what the README's header takes from Chart.yaml.
type chartMeta struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Version     string `yaml:"version"`
	AppVersion  string `yaml:"appVersion"`
	KubeVersion string `yaml:"kubeVersion"`
}

// Generate is the README.md of the chart with this Chart.yaml and values.yaml.
func Generate(chartYAML, valuesYAML []byte) ([]byte, error) {
	var meta chartMeta
	if err := yaml.Unmarshal(chartYAML, &meta); err != nil {
		return nil, fmt.Errorf("chart metadata (Chart.yaml): %w", err)
	}
	rows, err := Rows(valuesYAML)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s Helm chart\n\n", meta.Name)
	fmt.Fprintf(&b, "<!-- Generated from Chart.yaml and the comments of values.yaml; do not edit. Regenerate with:\n     %s -->\n\n", RegenerateCommand)
	fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(meta.Description))
	fmt.Fprintf(&b, "Chart version %s, faxgate %s, Kubernetes %s.\n\n", meta.Version, meta.AppVersion, meta.KubeVersion)
	b.WriteString("How to install it, upgrade it and run several replicas is in\n" +
		"[docs/deployment.md](../../../docs/deployment.md#deploying-with-helm).\n\n")
	b.WriteString("```sh\n" +
		"helm install faxgate deploy/helm/faxgate -n gateways \\\n" +
		"  --set apiKey.existingSecret=faxgate-api-key \\\n" +
		"  --set config.upstream.base_url=https://api.example.com\n" +
		"helm test faxgate -n gateways\n" +
		"```\n\n")
	b.WriteString("This file is generated from `values.yaml` (`# -- description` comments above each value) by\n" +
		"`deploy/test/chartreadme`; a test fails when it is stale. After changing `values.yaml`:\n\n")
	fmt.Fprintf(&b, "```sh\n%s\n```\n\n", RegenerateCommand)
	b.WriteString("## Values\n\n")
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", pipes("`"+r.Key+"`"), r.Type, pipes(r.Default), cell(r.Description))
	}
	return b.Bytes(), nil
}

// pipes escapes what would end a table cell (code spans show entities as
// they are, so only this).
func pipes(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// cell escapes prose for a table cell: pipes, and what would be taken for
// HTML ("<fullname>").
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// Rows are the documented values in the order values.yaml documents them.
func Rows(valuesYAML []byte) ([]Row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(valuesYAML, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml: not a map")
	}
	lines := strings.Split(string(valuesYAML), "\n")
	w := walker{lines: lines}
	w.mapping(doc.Content[0], "", false)
	w.absent(lines)
	if len(w.errs) > 0 {
		return nil, fmt.Errorf("values.yaml:\n  %s", strings.Join(w.errs, "\n  "))
	}
	slices.SortStableFunc(w.rows, func(a, b Row) int { return a.line - b.line })
	return w.rows, nil
}

type walker struct {
	lines []string
	rows  []Row
	seen  map[string]bool
	errs  []string
}

func (w *walker) mapping(m *yaml.Node, prefix string, inDocumented bool) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		path := prefix + k.Value
		desc, typ, def, ok := w.comment(k.Line)
		nonEmptyMap := v.Kind == yaml.MappingNode && len(v.Content) > 0
		switch {
		case ok:
			w.add(path, k.Line, v, desc, typ, def)
			if nonEmptyMap {
				w.mapping(v, path+".", true)
			}
		case nonEmptyMap:
			w.mapping(v, path+".", inDocumented)
		case !inDocumented:
			w.errs = append(w.errs, fmt.Sprintf("line %d: %s has no \"# -- description\" comment", k.Line, path))
		}
	}
}

func (w *walker) add(path string, line int, v *yaml.Node, desc, typ, def string) {
	if typ == "" {
		typ = typeOf(v)
		if typ == "" {
			w.errs = append(w.errs, fmt.Sprintf("line %d: %s defaults to null: name its type, \"# -- (int) ...\"", line, path))
		}
	}
	if def == "" {
		var val any
		if err := v.Decode(&val); err != nil {
			w.errs = append(w.errs, fmt.Sprintf("line %d: %s: %v", line, path, err))
		}
		def = "`" + compactJSON(val) + "`"
	}
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	w.seen[path] = true
	w.rows = append(w.rows, Row{Key: path, Type: typ, Default: def, Description: desc, line: line})
}

// comment is the description in the comment block right above line (1-based).
func (w *walker) comment(line int) (desc, typ, def string, ok bool) {
	top := line - 1 // index of the key's line
	for top > 0 && strings.HasPrefix(strings.TrimSpace(w.lines[top-1]), "#") {
		top--
	}
	block := w.lines[top : line-1]
	start := -1
	for i, l := range block {
		if descStart.MatchString(strings.TrimSpace(l)) {
			start = i
		}
	}
	if start < 0 {
		return "", "", "", false
	}
	first := descStart.FindStringSubmatch(strings.TrimSpace(block[start]))[1]
	desc, typ, def = describe(first, block[start+1:])
	return desc, typ, def, true
}

// absent adds the "# path -- description" values that values.yaml leaves out.
func (w *walker) absent(lines []string) {
	for i, l := range lines {
		m := pathStart.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		var more []string
		for _, next := range lines[i+1:] {
			t := strings.TrimSpace(next)
			if !strings.HasPrefix(t, "#") || descStart.MatchString(t) || pathStart.MatchString(t) {
				break
			}
			more = append(more, next)
		}
		if w.seen[m[1]] {
			w.errs = append(w.errs, fmt.Sprintf("line %d: %s is documented twice", i+1, m[1]))
			continue
		}
		desc, typ, def := describe(m[2], more)
		if typ == "" {
			w.errs = append(w.errs, fmt.Sprintf("line %d: %s is not in values.yaml: name its type, \"# %s -- (string) ...\"", i+1, m[1], m[1]))
		}
		if def == "" {
			def = "none"
		}
		w.rows = append(w.rows, Row{Key: m[1], Type: typ, Default: def, Description: desc, line: i + 1})
	}
}

// describe joins a description's first line and continuation lines, taking
// out a leading "(type)" and an "@default -- text" line.
func describe(first string, more []string) (desc, typ, def string) {
	if m := typeTag.FindStringSubmatch(first); m != nil {
		typ, first = m[1], first[len(m[0]):]
	}
	parts := []string{strings.TrimSpace(first)}
	for _, l := range more {
		t := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		if m := defaultAt.FindStringSubmatch(t); m != nil {
			def = m[1]
			continue
		}
		parts = append(parts, t)
	}
	return strings.TrimSpace(strings.Join(parts, " ")), typ, def
}

// typeOf names a default's type as helm-docs does; "" for null.
func typeOf(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "object"
	case yaml.SequenceNode:
		return "list"
	}
	switch v.Tag {
	case "!!str":
		return "string"
	case "!!int":
		return "int"
	case "!!bool":
		return "bool"
	case "!!float":
		return "float"
	}
	return ""
}

// compactJSON is a default as one line of JSON, keys sorted, <>& kept as is.
func compactJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(b.String())
}
