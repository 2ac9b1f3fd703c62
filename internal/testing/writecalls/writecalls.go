// Package writecalls records the write calls a test's connection or
// writer gets, as the kernel would see them: one entry per call, the sizes
// of the buffers it took (one for a write(2), several for a writev(2)).
// The tests' vecio.Writer doubles share it.
package writecalls

import (
	"slices"
	"sync"
)

// Recorder holds the calls recorded so far; the zero Recorder is empty.
// It is safe for concurrent use (a server writes from its own goroutine).
type Recorder struct {
	mu    sync.Mutex
	calls [][]int
}

// Add records one call that took bufs.
func (r *Recorder) Add(bufs ...[]byte) {
	call := make([]int, len(bufs))
	for i, p := range bufs {
		call[i] = len(p)
	}
	r.mu.Lock()
	r.calls = append(r.calls, call)
	r.mu.Unlock()
}

// Calls returns the calls recorded so far: per call, its buffers' sizes.
func (r *Recorder) Calls() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Len is the number of calls recorded so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// Reset forgets the calls recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.calls = nil
	r.mu.Unlock()
}
