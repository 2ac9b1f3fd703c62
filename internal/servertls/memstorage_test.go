package servertls

import (
	"context"
	"errors"
	"io/fs"
	"reflect"
	"testing"
	"time"
)

// TestMemStorage: the in-memory certmagic.Storage behaves as certmagic's
// FileStorage does for what certmagic asks of it.
func TestMemStorage(t *testing.T) {
	ctx := context.Background()
	s := newMemStorage()
	if _, err := s.Load(ctx, "a/b"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of nothing = %v, want fs.ErrNotExist", err)
	}
	for _, k := range []string{"certs/x/x.crt", "certs/x/x.key", "certs/y/y.crt", "other"} {
		if err := s.Store(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := s.Load(ctx, "certs/x/x.key"); err != nil || string(b) != "certs/x/x.key" {
		t.Fatalf("Load = %q, %v", b, err)
	}
	if !s.Exists(ctx, "certs/x") || !s.Exists(ctx, "other") || s.Exists(ctx, "cert") {
		t.Errorf("Exists is wrong about a directory, a key or a prefix that is neither")
	}
	if got, _ := s.List(ctx, "certs", false); !reflect.DeepEqual(got, []string{"certs/x", "certs/y"}) {
		t.Errorf("List = %v", got)
	}
	if got, _ := s.List(ctx, "certs", true); !reflect.DeepEqual(got, []string{"certs/x/x.crt", "certs/x/x.key", "certs/y/y.crt"}) {
		t.Errorf("List recursive = %v", got)
	}
	if ki, err := s.Stat(ctx, "certs/x/x.crt"); err != nil || !ki.IsTerminal || ki.Size != int64(len("certs/x/x.crt")) {
		t.Errorf("Stat of a key = %+v, %v", ki, err)
	}
	if ki, err := s.Stat(ctx, "certs/x"); err != nil || ki.IsTerminal {
		t.Errorf("Stat of a directory = %+v, %v", ki, err)
	}
	if err := s.Delete(ctx, "certs/x"); err != nil || s.Exists(ctx, "certs/x/x.crt") || !s.Exists(ctx, "certs/y/y.crt") {
		t.Errorf("Delete of a directory: %v", err)
	}

	// A held lock makes the next Lock wait until Unlock or its context ends.
	if err := s.Lock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Lock(short, "l"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held lock = %v, want it to wait out its context", err)
	}
	got := make(chan error, 1)
	go func() { got <- s.Lock(ctx, "l") }()
	_ = s.Unlock(ctx, "l")
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock did not get the lock after Unlock")
	}
}
