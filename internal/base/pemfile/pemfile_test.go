package pemfile

import (
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.pem")
	if err := Write(p, "CERTIFICATE", []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" || string(blk.Bytes) != "\x01\x02\x03" || len(rest) != 0 {
		t.Fatalf("read back %q", b)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, err %v; want 0600", fi.Mode().Perm(), err)
	}
}
