package ascii

import (
	"strconv"
	"testing"
)

func TestEqualFold(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"Transfer-Encoding", "transfer-encoding", true},
		{"V1", "v1", true},
		{"", "", true},
		{"v1", "v2", false},
		{"v1", "v1 ", false},
		{"Tranſfer-Encoding", "transfer-encoding", false}, // long s: Unicode folding only
		{"\u212a", "k", false},                            // Kelvin sign
		{"@", "`", false},                                 // neighbours of the letter ranges
		{"[", "{", false},
	} {
		if got := EqualFold(tc.a, tc.b); got != tc.want {
			t.Errorf("EqualFold(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := EqualFold([]byte(tc.a), tc.b); got != tc.want {
			t.Errorf("EqualFold([]byte(%q), %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestItoa(t *testing.T) {
	for _, n := range []int64{0, 1, 9, 10, 99, 200, 404, 599, 1023, 1024, 65535, -1, -1024, 1 << 40} {
		if got, want := Itoa(n), strconv.FormatInt(n, 10); got != want {
			t.Errorf("Itoa(%d) = %q, want %q", n, got, want)
		}
	}
	if a := testing.AllocsPerRun(100, func() { _ = Itoa(429) }); a != 0 {
		t.Errorf("Itoa(429) allocates %v times, want 0", a)
	}
}
