package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The decoder walks the YAML node tree against the Config struct itself
// rather than using yaml.Node.Decode with KnownFields: that way every
// problem (unknown or duplicate key, wrong type, bad ${NAME}) carries its
// YAML path, all of them are reported rather than the first, and ${NAME} is
// expanded per scalar before the scalar is converted, so durations and
// integers can come from the environment too.

// maxNodes bounds the work a document of aliases can cause: each alias is
// decoded again wherever it is used.
const maxNodes = 100_000

var durationType = reflect.TypeOf(time.Duration(0))

type decoder struct {
	getenv       func(string) (string, bool)
	problems     Problems
	problemLines []int // the line of each problem
	// src maps the path of every scalar in the file to its text as written,
	// before expansion. Messages quote this text, so a value that came from
	// the environment is shown as "${NAME}", never as its value.
	src map[string]string
	// lines maps the path of every key and list element in the file to
	// its line, to report problems in file order.
	lines  map[string]int
	failed []string // paths with a decoding problem
	nodes  int
}

// line returns the line of path in the file, or of its nearest ancestor
// there; 0 when the file has neither.
func (d *decoder) line(path string) int {
	for {
		if l, ok := d.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
}

func (d *decoder) add(path, format string, args ...any) {
	d.addAt(d.line(path), path, format, args...)
}

// addAt adds a problem found at line of the file.
func (d *decoder) addAt(line int, path, format string, args ...any) {
	d.problems = append(d.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	d.problemLines = append(d.problemLines, line)
	d.failed = append(d.failed, path)
}

// failedAt reports whether path, or a path above it, failed to decode.
func (d *decoder) failedAt(path string) bool {
	for _, f := range d.failed {
		if isUnder(path, f) {
			return true
		}
	}
	return false
}

// decode sets *out (a pointer) from n, keeping out's current value for
// anything the document does not say.
func (d *decoder) decode(n *yaml.Node, out any, path string) {
	d.value(n, reflect.ValueOf(out).Elem(), path)
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	for depth := 0; n.Kind == yaml.AliasNode; depth++ {
		if n.Alias == nil || depth > 100 {
			d.add(path, "invalid alias")
			return
		}
		n = n.Alias
	}
	if d.nodes++; d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.add("", "document too large (aliases expand to more than %d values)", maxNodes)
		}
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		// As yaml does: an empty value clears a list or an optional
		// section and leaves everything else at its default, so that a
		// section whose keys are all commented out is not an error.
		switch v.Kind() {
		case reflect.Slice, reflect.Pointer:
			v.SetZero()
		}
		return
	}
	switch {
	case v.Type() == durationType:
		d.duration(n, v, path)
	case v.Kind() == reflect.Struct:
		d.mapping(n, v, path)
	case v.Kind() == reflect.Pointer:
		if v.Type().Elem().Kind() != reflect.Struct {
			// An optional value (such as a share's cap): set when given.
			e := reflect.New(v.Type().Elem())
			d.value(n, e.Elem(), path)
			v.Set(e)
			return
		}
		if n.Kind != yaml.MappingNode {
			d.add(path, "expected a mapping, got %s", kindName(n))
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, v.Elem(), path)
	case v.Kind() == reflect.Slice:
		d.sequence(n, v, path)
	case v.Kind() == reflect.Map:
		d.dict(n, v, path)
	default:
		d.scalar(n, v, path)
	}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		if path == "" {
			d.add(path, "the file must be a mapping of sections, got %s", kindName(n))
			return
		}
		d.add(path, "expected a mapping, got %s", kindName(n))
		return
	}
	fields := yamlFields(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.addAt(k.Line, path, "line %d: keys must be plain names, got %s", k.Line, kindName(k))
			continue
		}
		kp := joinPath(path, k.Value)
		if k.ShortTag() == "!!merge" {
			d.add(kp, "merge keys are not supported")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.addAt(k.Line, kp, "duplicate key (first at line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		d.lines[kp] = k.Line
		idx, ok := fields[k.Value]
		if !ok {
			d.add(kp, "unknown key")
			continue
		}
		d.value(val, v.Field(idx), kp)
	}
}

// dict decodes a mapping with names of the file's choosing as keys (such as
// upstream_budget.shares, keyed by caller name) into a map with string keys.
func (d *decoder) dict(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.add(path, "expected a mapping, got %s", kindName(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			d.addAt(k.Line, path, "line %d: keys must be plain names, got %s", k.Line, kindName(k))
			continue
		}
		kp := joinPath(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.addAt(k.Line, kp, "duplicate key (first at line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		d.lines[kp] = k.Line
		e := reflect.New(v.Type().Elem()).Elem()
		d.value(val, e, kp)
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), e)
	}
	v.Set(m)
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.add(path, "expected a list, got %s", kindName(n))
		return
	}
	// A list in the file replaces the default list; elements start from
	// their zero value, not from a default element.
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		d.lines[ep] = e.Line
		d.value(e, s.Index(i), ep)
	}
	v.Set(s)
}

// text returns the expanded text of scalar n, recording its source text;
// ok is false when n is not a scalar or its expansion failed.
func (d *decoder) text(n *yaml.Node, path string) (s string, ok bool) {
	if n.Kind != yaml.ScalarNode {
		d.add(path, "expected a single value, got %s", kindName(n))
		return "", false
	}
	d.src[path] = n.Value
	s, _, errs := expand(n.Value, d.getenv)
	for _, e := range errs {
		d.add(path, "%s", e)
	}
	return s, len(errs) == 0
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.text(n, path)
	if !ok {
		return
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		if strings.Contains(err.Error(), "missing unit") {
			d.add(path, "invalid duration %q (missing unit, e.g. \"90s\")", n.Value)
			return
		}
		d.add(path, "invalid duration %q", n.Value)
		return
	}
	v.SetInt(int64(dur))
}

func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.text(n, path)
	if !ok {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		switch s {
		case "true", "True", "TRUE":
			v.SetBool(true)
		case "false", "False", "FALSE":
			v.SetBool(false)
		default:
			d.add(path, "invalid boolean %q (want true or false)", n.Value)
		}
	case reflect.Int, reflect.Int64:
		i, err := parseInt(s, v.Type().Bits())
		switch {
		case err == nil:
			v.SetInt(i)
		case isRangeErr(err):
			d.add(path, "integer %q out of range", n.Value)
		default:
			d.add(path, "invalid integer %q", n.Value)
		}
	case reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.add(path, "invalid number %q", n.Value)
			return
		}
		v.SetFloat(f)
	default:
		panic(fmt.Sprintf("config: no decoder for %s at %s", v.Type(), path))
	}
}

// parseInt accepts decimal and, as YAML does, 0x, 0o and 0b prefixes. A
// leading zero does not make a number octal.
func parseInt(s string, bits int) (int64, error) {
	digits := strings.TrimLeft(s, "+-")
	if len(digits) > 1 && digits[0] == '0' && strings.ContainsRune("xXoObB", rune(digits[1])) {
		return strconv.ParseInt(s, 0, bits)
	}
	return strconv.ParseInt(s, 10, bits)
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a single value"
	}
	return "something else"
}

// yamlFields maps the yaml key of each field of struct type t to its index.
func yamlFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		m[name] = i
	}
	return m
}
