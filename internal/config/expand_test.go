package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	env := map[string]string{
		"HOST":  "api.example.com",
		"EMPTY": "",
		"REF":   "${HOST}", // never expanded again
		"DOLL":  "a$$b",
		"_x1":   "v",
	}
	getenv := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	for _, tc := range []struct {
		in, want string
		expanded bool
		errs     []string
	}{
		{in: "plain", want: "plain"},
		{in: "", want: ""},
		{in: "${HOST}", want: "api.example.com", expanded: true},
		{in: "https://${HOST}/v1", want: "https://api.example.com/v1", expanded: true},
		{in: "${HOST}${HOST}", want: "api.example.comapi.example.com", expanded: true},
		{in: "[${EMPTY}]", want: "[]", expanded: true},
		{in: "${_x1}", want: "v", expanded: true},
		{in: "${REF}", want: "${HOST}", expanded: true},
		{in: "${DOLL}", want: "a$$b", expanded: true},
		{in: "$$", want: "$"},
		{in: "$${HOST}", want: "${HOST}"},
		{in: "$$$${HOST}", want: "$${HOST}"},
		{in: "$$${HOST}", want: "$api.example.com", expanded: true},
		{in: "a$b", want: "a$b"},
		{in: "$HOST", want: "$HOST"},
		{in: "cost: 5$", want: "cost: 5$"},
		{in: "$", want: "$"},
		{in: "${NOPE}", want: "", errs: []string{`environment variable "NOPE" is not set`}},
		{in: "x${NOPE}y${HOST}", want: "xyapi.example.com", expanded: true,
			errs: []string{`environment variable "NOPE" is not set`}},
		{in: "${HOST", want: "${HOST", errs: []string{`unclosed "${" (write "$$" for a literal "$")`}},
		{in: "${", want: "${", errs: []string{`unclosed "${" (write "$$" for a literal "$")`}},
		{in: "${}", want: "", errs: []string{`invalid environment variable name ""`}},
		{in: "${1X}", want: "", errs: []string{`invalid environment variable name "1X"`}},
		{in: "${A-B}", want: "", errs: []string{`invalid environment variable name "A-B"`}},
		{in: "${HOST:-x}", want: "", errs: []string{`invalid environment variable name "HOST:-x"`}},
		{in: "${ HOST }", want: "", errs: []string{`invalid environment variable name " HOST "`}},
		{in: "é${HOST}ü", want: "éapi.example.comü", expanded: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, expanded, errs := expand(tc.in, getenv)
			if got != tc.want || expanded != tc.expanded || !reflect.DeepEqual(errs, tc.errs) {
				t.Errorf("expand(%q) = %q, %v, %q; want %q, %v, %q", tc.in, got, expanded, errs, tc.want, tc.expanded, tc.errs)
			}
		})
	}
}

func TestExpandNilGetenv(t *testing.T) {
	if _, _, errs := expand("${HOME}", nil); len(errs) != 1 {
		t.Errorf("with a nil getenv, ${HOME} should be unset; errs = %q", errs)
	}
}

func TestValidEnvName(t *testing.T) {
	for name, want := range map[string]bool{
		"A": true, "_": true, "a_B9": true, "FAXGATE_API_KEY": true,
		"": false, "9A": false, "A-B": false, "A.B": false, "Ä": false, "A B": false,
	} {
		if got := validEnvName(name); got != want {
			t.Errorf("validEnvName(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzExpand checks properties of the expander on arbitrary text.
func FuzzExpand(f *testing.F) {
	for _, seed := range []struct{ s, val string }{
		{"plain", "v"},            // nothing to expand
		{"${X}", "value"},         // a whole value
		{"a${X}b${Y}c", "mid"},    // inside text, one set, one unset
		{"$$${X}$", "v"},          // escapes around a reference
		{"${X", "v"},              // unclosed
		{"${}${1}${X-Y}", "v"},    // invalid names
		{"${X}", "${X}"},          // a value that looks like a reference
		{"\xff${X}\x00", "\xfe$"}, // bytes that are not UTF-8
	} {
		f.Add(seed.s, seed.val)
	}
	f.Fuzz(func(t *testing.T, s, val string) {
		getenv := func(n string) (string, bool) {
			if n == "X" {
				return val, true
			}
			return "", false
		}
		out, _, errs0 := expand(s, getenv) // must not panic

		if !strings.Contains(s, "$") && (out != s || errs0 != nil) {
			t.Errorf("expand(%q) = %q, %q; text without $ must come back unchanged", s, out, errs0)
		}

		// Not recursive: ${X} is X's value byte for byte, whatever it holds.
		got, expanded, errs := expand("${X}", getenv)
		if got != val || !expanded || errs != nil {
			t.Errorf("expand(${X}) with X=%q = %q, %v, %q", val, got, expanded, errs)
		}
		if !strings.Contains(val, "$") && strings.Contains(got, "${") {
			t.Errorf("expanding ${X} with X=%q left a reference: %q", val, got)
		}

		// Escaping every $ as $$ gives back the text itself.
		if got, expanded, errs := expand(strings.ReplaceAll(s, "$", "$$"), getenv); got != s || expanded || errs != nil {
			t.Errorf("expand(escaped %q) = %q, %v, %q", s, got, expanded, errs)
		}

		// Errors depend on the text alone, never on a variable's value.
		_, _, other := expand(s, func(n string) (string, bool) { return "other", n == "X" })
		if !reflect.DeepEqual(errs0, other) {
			t.Errorf("expand(%q): errors %q with X=%q but %q with X=\"other\"", s, errs0, val, other)
		}
	})
}
