package ascii

import "testing"

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
