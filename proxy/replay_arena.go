package proxy

import (
	"runtime"
	"sync"
)

// chunkArena holds the copy chunks of every streamed body: one region of
// server.resend_buffer_bytes, mapped on first use outside the
// garbage-collected heap (arena_linux.go). Chunks are carved from it in
// order and reused most recently returned first, so the memory the copies
// take is what they hold at their busiest, never more, and none of it
// raises the collector's target for the rest of the heap: held in the heap,
// 4 MiB of copies would let as much garbage pile up again before a
// collection (docs/performance.md, Memory).
type chunkArena struct {
	size int // chunks in the region

	mu   sync.Mutex
	mem  []byte
	next int                  // chunks carved so far
	free []*[replayChunk]byte // returned chunks, most recent last
}

// get returns a free chunk; nil when all are out or the region cannot be
// mapped (the body then streams without a copy, as past the cap).
func (a *chunkArena) get() *[replayChunk]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.free); n > 0 {
		c := a.free[n-1]
		a.free = a.free[:n-1]
		return c
	}
	if a.next == a.size {
		return nil
	}
	if a.mem == nil {
		mem, err := mapRegion(a.size * replayChunk)
		if err != nil {
			return nil
		}
		a.mem = mem
		// The region goes with the arena: its chunks are only reachable
		// through bodies that hold the pool, and so the arena.
		runtime.AddCleanup(a, unmapRegion, mem)
	}
	c := (*[replayChunk]byte)(a.mem[a.next*replayChunk:])
	a.next++
	return c
}

func (a *chunkArena) put(c *[replayChunk]byte) {
	a.mu.Lock()
	a.free = append(a.free, c)
	a.mu.Unlock()
}
