package filedigest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("one")
	a, err := Of(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := Of(path); b != a {
		t.Errorf("same content, different digests")
	}
	write("two")
	if b, _ := Of(path); b == a {
		t.Errorf("changed content, same digest")
	}
	if _, err := Of(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Errorf("missing file: no error")
	}
}
