package servertls

import (
	"context"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
)

// memStorage is a certmagic.Storage held in memory. Mode files keeps
// nothing worth persisting (the certificate is re-read from its files, and
// OCSP stapling is off), but certmagic must be given some storage: left
// unset, it writes under $HOME, which breaks on a read-only root filesystem
// and would leave files behind on a shared node.
type memStorage struct {
	mu    sync.Mutex
	data  map[string]memEntry
	locks map[string]chan struct{} // held locks; closed on Unlock
}

type memEntry struct {
	value    []byte
	modified time.Time
}

var _ certmagic.Storage = (*memStorage)(nil)

func newMemStorage() *memStorage {
	return &memStorage{data: map[string]memEntry{}, locks: map[string]chan struct{}{}}
}

// Lock waits until name is free or ctx ends.
func (s *memStorage) Lock(ctx context.Context, name string) error {
	for {
		s.mu.Lock()
		held, ok := s.locks[name]
		if !ok {
			s.locks[name] = make(chan struct{})
			s.mu.Unlock()
			return nil
		}
		s.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Unlock releases name.
func (s *memStorage) Unlock(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.locks[name]; ok {
		close(held)
		delete(s.locks, name)
	}
	return nil
}

func (s *memStorage) Store(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[key] = memEntry{append([]byte(nil), value...), time.Now()}
	return nil
}

func (s *memStorage) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[key]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return append([]byte(nil), e.value...), nil
}

// Delete removes key and everything under it, as FileStorage does for a
// directory.
func (s *memStorage) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	found := false
	for k := range s.data {
		if k == key || strings.HasPrefix(k, key+"/") {
			delete(s.data, k)
			found = true
		}
	}
	if !found {
		return fs.ErrNotExist
	}
	return nil
}

func (s *memStorage) Exists(_ context.Context, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.data {
		if k == key || strings.HasPrefix(k, key+"/") {
			return true
		}
	}
	return false
}

// List returns the keys directly under path, or all of them when recursive.
func (s *memStorage) List(_ context.Context, path string, recursive bool) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := strings.TrimSuffix(path, "/") + "/"
	seen := map[string]bool{}
	for k := range s.data {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		if !recursive {
			first, _, _ := strings.Cut(rest, "/")
			k = prefix + first
		}
		seen[k] = true
	}
	if len(seen) == 0 {
		return nil, fs.ErrNotExist
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

func (s *memStorage) Stat(_ context.Context, key string) (certmagic.KeyInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.data[key]; ok {
		return certmagic.KeyInfo{Key: key, Modified: e.modified, Size: int64(len(e.value)), IsTerminal: true}, nil
	}
	for k := range s.data {
		if strings.HasPrefix(k, key+"/") {
			return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
		}
	}
	return certmagic.KeyInfo{}, fs.ErrNotExist
}
