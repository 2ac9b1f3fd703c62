package metrics_test

import (
	"strings"
	"testing"

	"github.com/faxgate/faxgate/metrics"
)

func TestMethod(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET", "GET"}, {"POST", "POST"}, {"PATCH", "PATCH"}, {"PUT", "PUT"}, {"DELETE", "DELETE"},
		// Anything else collapses, so a caller cannot mint label values.
		{"get", "other"}, {"Post", "other"}, {"HEAD", "other"}, {"OPTIONS", "other"},
		{"CONNECT", "other"}, {"TRACE", "other"}, {"PROPFIND", "other"}, {"", "other"},
		{"GET ", "other"}, {"DELETE\x00", "other"}, {strings.Repeat("X", 1000), "other"},
	} {
		if got := metrics.Method(tc.in); got != tc.want {
			t.Errorf("Method(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = metrics.Method("PATCH"), metrics.Method("HEAD") }); n != 0 {
		t.Errorf("Method allocates %v times per call, want 0 (it is on every request)", n)
	}
}

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		in   int
		want string
	}{
		{200, "200"}, {101, "101"}, {404, "404"}, {499, "499"}, {503, "503"}, {599, "599"},
		{100, "100"}, {99, "99"}, {0, "0"},
		// Out of the table: a fixed word, never an unbounded set of values.
		{600, "other"}, {999, "other"}, {-1, "other"}, {1 << 30, "other"},
	} {
		if got := metrics.Code(tc.in); got != tc.want {
			t.Errorf("Code(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = metrics.Code(404) }); n != 0 {
		t.Errorf("Code allocates %v times per call, want 0 (it is on every request)", n)
	}
}
