package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Problem is one thing wrong with a configuration, at a YAML path like
// "callers.list[2].cidrs[0]".
type Problem struct {
	// Path is the YAML path of the offending key; empty for the whole file.
	Path string
	// Message says what is wrong; it never holds a secret or an
	// environment variable's value.
	Message string
}

// String returns "path: message", or just the message when Path is empty.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Problems is an error holding every problem found.
type Problems []Problem

// Error returns one problem per line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Load reads path, expands ${NAME} from getenv, decodes strictly on top of
// Default(), and validates. It returns a nil *Config and a Problems error
// when anything is wrong (syntax, unknown key, bad env, invalid value), and
// a wrapped os error when the file cannot be read. A nil getenv treats every
// variable as unset; the package never reads the environment itself.
func Load(path string, getenv func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(data, getenv)
}

// LoadAndCheck is Load followed by CheckEnvironment: it also reads the
// files and environment variables the configuration names, as faxgate
// serve does before it starts, and reports every problem of both kinds in
// file order. faxgate check and faxgate serve both load through it, so
// check refuses every file serve would refuse in the same environment.
func LoadAndCheck(path string, getenv func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return parse(data, getenv, true)
}

// Parse is Load on bytes. Problems are in file order: each at the line of
// its key, or of the nearest enclosing key the file has. A validation
// problem at a path that already failed to decode is left out, since it
// would only repeat the first.
func Parse(data []byte, getenv func(string) (string, bool)) (*Config, error) {
	return parse(data, getenv, false)
}

// parse is Parse, plus CheckEnvironment when env is set. An environment
// problem at a path that already has a problem is left out: a file name
// that is blank, or a variable name that is invalid, needs no second line
// saying it cannot be read.
func parse(data []byte, getenv func(string) (string, bool), env bool) (*Config, error) {
	root, p := parseYAML(data)
	if p != nil {
		return nil, Problems{*p}
	}
	cfg := Default()
	d := &decoder{getenv: getenv, src: map[string]string{}, lines: map[string]int{}}
	if root != nil {
		d.decode(root, &cfg, "")
	}
	type found struct {
		p    Problem
		line int
	}
	var all []found
	for i, p := range d.problems {
		all = append(all, found{p, d.problemLines[i]})
	}
	v := &validator{src: d.src}
	v.validate(&cfg)
	for _, p := range v.problems {
		if !d.failedAt(p.Path) {
			all = append(all, found{p, d.line(p.Path)})
		}
	}
	if env {
		e := &validator{src: d.src}
		e.environment(&cfg, getenv)
		for _, p := range e.problems {
			if !d.failedAt(p.Path) && !v.hasProblemAt(p.Path) {
				all = append(all, found{p, d.line(p.Path)})
			}
		}
	}
	if len(all) > 0 {
		sort.SliceStable(all, func(i, j int) bool { return all[i].line < all[j].line })
		ps := make(Problems, len(all))
		for i, f := range all {
			ps[i] = f.p
		}
		return nil, ps
	}
	return &cfg, nil
}

// parseYAML returns the single document's root node, nil for a file that is
// empty or only comments.
func parseYAML(data []byte) (*yaml.Node, *Problem) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxProblem(err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxProblem(err)
	default:
		return nil, &Problem{Message: fmt.Sprintf("line %d: a second YAML document (the file must hold exactly one)", next.Line)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

func syntaxProblem(err error) *Problem {
	return &Problem{Message: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}

// joinPath appends key to a dotted YAML path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// isUnder reports whether path is base or lies below it; every path lies
// below the root "".
func isUnder(path, base string) bool {
	if base == "" {
		return true
	}
	if !strings.HasPrefix(path, base) {
		return false
	}
	rest := path[len(base):]
	return rest == "" || rest[0] == '.' || rest[0] == '['
}
