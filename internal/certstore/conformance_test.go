package certstore_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// certmagic ships no storage conformance checks, so this is ours: every
// storage faxgate may hand certmagic must pass it. It runs against
// certmagic's own FileStorage, the reference whose semantics certmagic was
// written against, and against the Redis storage on one node and on a
// cluster.

// opener returns two handles on one fresh, empty namespace of a backend, as
// two replicas would see it.
type opener func(t *testing.T) (a, b certmagic.Storage)

func fileStorage(t *testing.T) (certmagic.Storage, certmagic.Storage) {
	dir := t.TempDir()
	return &certmagic.FileStorage{Path: dir}, &certmagic.FileStorage{Path: dir}
}

func TestConformanceFileStorage(t *testing.T) {
	t.Parallel() // FileStorage's lock polls once a second: mostly sleep
	conformance(t, fileStorage)
}

// conformance runs every case, each in a fresh namespace.
func conformance(t *testing.T, open opener) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context, a, b certmagic.Storage)
	}{
		{"store and load", confStoreLoad},
		{"exists", confExists},
		{"stat", confStat},
		{"list", confList},
		{"delete", confDelete},
		{"lock", confLock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			tc.run(t, ctx, a, b)
		})
	}
}

func mustStore(t *testing.T, ctx context.Context, s certmagic.Storage, key string, value []byte) {
	t.Helper()
	if err := s.Store(ctx, key, value); err != nil {
		t.Fatalf("Store(%q): %v", key, err)
	}
}

func confStoreLoad(t *testing.T, ctx context.Context, a, b certmagic.Storage) {
	if _, err := a.Load(ctx, "certificates/none/none.crt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing key: err = %v, want fs.ErrNotExist", err)
	}
	const key = "certificates/acme/example.com/example.com.crt"
	mustStore(t, ctx, a, key, []byte("first"))
	mustStore(t, ctx, a, key, []byte("second")) // overwrites
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	mustStore(t, ctx, a, "acme/bin", binary)
	mustStore(t, ctx, a, "acme/empty", []byte{})
	for _, tc := range []struct {
		key  string
		want []byte
	}{
		{key, []byte("second")},
		{"/" + key, []byte("second")}, // a leading slash is the same key
		{"certificates//acme/example.com/example.com.crt", []byte("second")}, // so is a doubled one
		{"acme/bin", binary},
		{"acme/empty", []byte{}},
	} {
		for name, s := range map[string]certmagic.Storage{"same handle": a, "other handle": b} {
			got, err := s.Load(ctx, tc.key)
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Errorf("%s: Load(%q) = %q, %v; want %q", name, tc.key, got, err, tc.want)
			}
		}
	}
	if _, err := a.Load(ctx, "certificates/acme"); err == nil {
		t.Errorf("Load of a directory: no error")
	}
}

func confExists(t *testing.T, ctx context.Context, a, b certmagic.Storage) {
	mustStore(t, ctx, a, "a/b/c.txt", []byte("x"))
	for key, want := range map[string]bool{
		"a/b/c.txt": true,
		"a/b":       true, // a directory
		"a/b/":      true,
		"a":         true,
		"a/b/c":     false, // a string prefix of a key is not a key
		"x":         false,
		// Not asked: "a/b/c.txt/d". FileStorage says it exists, because
		// os.Stat fails with ENOTDIR rather than fs.ErrNotExist.
	} {
		if got := b.Exists(ctx, key); got != want {
			t.Errorf("Exists(%q) = %v, want %v", key, got, want)
		}
	}
}

func confStat(t *testing.T, ctx context.Context, a, b certmagic.Storage) {
	before := time.Now()
	mustStore(t, ctx, a, "a/b/c.txt", []byte("12345"))
	after := time.Now()
	info, err := b.Stat(ctx, "a/b/c.txt")
	if err != nil {
		t.Fatalf("Stat(file): %v", err)
	}
	// File systems keep coarse times; a second either side is generous.
	if info.Key != "a/b/c.txt" || !info.IsTerminal || info.Size != 5 ||
		info.Modified.Before(before.Add(-time.Second)) || info.Modified.After(after.Add(time.Second)) {
		t.Errorf("Stat(file) = %+v; want key a/b/c.txt, terminal, size 5, modified in [%v, %v]", info, before, after)
	}
	info, err = b.Stat(ctx, "a/b")
	if err != nil || info.Key != "a/b" || info.IsTerminal {
		t.Errorf("Stat(directory) = %+v, %v; want key a/b, not terminal", info, err)
	}
	if _, err := b.Stat(ctx, "a/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing): err = %v, want fs.ErrNotExist", err)
	}
}

func confList(t *testing.T, ctx context.Context, a, b certmagic.Storage) {
	for _, k := range []string{"a/b/c.txt", "a/b/d.txt", "a/e.txt", "a/f/g/h.txt", "ab.txt"} {
		mustStore(t, ctx, a, k, []byte(k))
	}
	for _, tc := range []struct {
		dir       string
		recursive bool
		want      []string
	}{
		{"a", false, []string{"a/b", "a/e.txt", "a/f"}},
		{"a", true, []string{"a/b", "a/b/c.txt", "a/b/d.txt", "a/e.txt", "a/f", "a/f/g", "a/f/g/h.txt"}},
		{"a/b", false, []string{"a/b/c.txt", "a/b/d.txt"}},
		{"a/f", false, []string{"a/f/g"}},
		{"", false, []string{"a", "ab.txt"}},
		{"a/e.txt", false, nil}, // a key has no children
	} {
		got, err := b.List(ctx, tc.dir, tc.recursive)
		sort.Strings(got)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("List(%q, %v) = %q, %v; want %q", tc.dir, tc.recursive, got, err, tc.want)
		}
	}
	if _, err := b.List(ctx, "a/x", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List(missing): err = %v, want fs.ErrNotExist", err)
	}
}

func confDelete(t *testing.T, ctx context.Context, a, b certmagic.Storage) {
	for _, k := range []string{"a/b/c.txt", "a/b/d/e.txt", "a/bc.txt", "a/e.txt"} {
		mustStore(t, ctx, a, k, []byte(k))
	}
	if err := b.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("Delete(directory): %v", err)
	}
	for key, want := range map[string]bool{
		"a/b": false, "a/b/c.txt": false, "a/b/d/e.txt": false,
		"a/bc.txt": true, // shares a string prefix, not the directory
		"a/e.txt":  true,
	} {
		if got := a.Exists(ctx, key); got != want {
			t.Errorf("after Delete(a/b): Exists(%q) = %v, want %v", key, got, want)
		}
	}
	if err := b.Delete(ctx, "a/e.txt"); err != nil || a.Exists(ctx, "a/e.txt") {
		t.Errorf("Delete(key) = %v; key still exists: %v", err, a.Exists(ctx, "a/e.txt"))
	}
	if err := b.Delete(ctx, "no/such/key"); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
}

func confLock(t *testing.T, ctx context.Context, a, b certmagic.Storage) {
	const name = "issue_cert_example.com"
	if err := a.Lock(ctx, name); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if tl, ok := b.(certmagic.TryLocker); ok {
		if got, err := tl.TryLock(ctx, name); got || err != nil {
			t.Errorf("TryLock while the other holds it = %v, %v; want false, nil", got, err)
		}
	}
	// A waiting Lock gives up when its context does.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	err := b.Lock(wctx, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock while held, context expiring: err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Lock took %v to honour its context", d)
	}
	// Another name is independent.
	if err := b.Lock(ctx, "other"); err != nil {
		t.Fatalf("Lock(other name): %v", err)
	}
	if err := b.Unlock(ctx, "other"); err != nil {
		t.Errorf("Unlock(other name): %v", err)
	}

	if err := a.Unlock(ctx, name); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := b.Lock(ctx, name); err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	if err := b.Unlock(ctx, name); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if tl, ok := a.(certmagic.TryLocker); ok {
		got, err := tl.TryLock(ctx, name)
		if !got || err != nil {
			t.Errorf("TryLock of a free lock = %v, %v; want true, nil", got, err)
		}
		if err := tl.Unlock(ctx, name); err != nil {
			t.Errorf("Unlock after TryLock: %v", err)
		}
	}
}
