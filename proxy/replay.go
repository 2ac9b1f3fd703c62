package proxy

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// A request body streams upstream as it arrives, and a copy is kept in
// pooled chunks as it passes, so that an upstream 401 can still be answered
// by one resend with a new token (docs/tokens.md) without buffering the
// body up front. The copies of all requests together hold at most
// server.resend_buffer_bytes; a body that would go over it, or over
// retryBufferMax, streams without a copy, and a 401 on it is relayed and
// counted (faxgate_upstream_401_unretried_total).
//
// RoundTrip may close a body after it returns, so the chunks go back to the
// pool only when every reader of them is done: the first attempt over (its
// body closed, or the forward returned), the resend's body (if any)
// closed, and the handler finished.

// replayChunk is the unit of a copy: the size of the reads an upload is
// sent upstream through (sendBufSize, replay_send.go).
const replayChunk = sendBufSize

var errNotReplayable = errors.New("request body was not kept for a resend")

// replayPool hands out copy chunks and holds the process-wide cap.
type replayPool struct {
	chunks *chunkArena
	limit  int64
	held   atomic.Int64
}

func newReplayPool(limit int64) *replayPool {
	return &replayPool{limit: limit, chunks: &chunkArena{size: int(limit / replayChunk)}}
}

// get reserves one chunk under the cap; nil when the cap is reached.
func (p *replayPool) get() *[replayChunk]byte {
	if p.held.Add(replayChunk) > p.limit {
		p.held.Add(-replayChunk)
		return nil
	}
	c := p.chunks.get()
	if c == nil {
		p.held.Add(-replayChunk)
	}
	return c
}

func (p *replayPool) put(c *[replayChunk]byte) {
	p.chunks.put(c)
	p.held.Add(-replayChunk)
}

// reserve counts n more bytes of body memory under the cap; false, and
// nothing counted, when they would pass it, unless force. Forced
// reservations are for the bodies of requests policy allowed on a
// sensitive route (policy.confirm reads them; a delete's audit line names
// their IDs): they are counted, so that other copies yield to them, but
// never refused, so refused callers holding the memory cannot take a
// granted delete's confirmation or the truth of its audit line.
func (p *replayPool) reserve(n int64, force bool) bool {
	if p.held.Add(n) > p.limit && !force {
		p.held.Add(-n)
		return false
	}
	return true
}

// release returns n bytes counted by reserve.
func (p *replayPool) release(n int64) { p.held.Add(-n) }

// readAll reads r to its end into one buffer of at most max+1 bytes whose
// memory is reserved under the cap as it grows (*reserved adds what is
// counted; the caller releases it). hint, when above 0, is the body's
// known length: the buffer is then sized for it at once. complete is false
// when the cap stopped the read before the end (data holds what was read,
// the rest is unread); len(data) > max means the body is longer than max.
// Growing leaves the previous buffer to the garbage collector, uncounted.
func (p *replayPool) readAll(r io.Reader, max, hint int64, force bool, reserved *int64) (data []byte, complete bool, err error) {
	size := int64(4 << 10)
	if hint > 0 {
		size = hint + 1 // room to read the EOF without growing
	}
	size = min(size, max+1)
	if !p.reserve(size, force) {
		return nil, false, nil
	}
	*reserved += size
	data = make([]byte, 0, size)
	for {
		if len(data) == cap(data) {
			if int64(len(data)) > max {
				return data, true, nil
			}
			grow := min(int64(cap(data))*2, max+1) - int64(cap(data))
			if !p.reserve(grow, force) {
				return data, false, nil
			}
			*reserved += grow
			nd := make([]byte, len(data), int64(cap(data))+grow)
			copy(nd, data)
			data = nd
		}
		n, rerr := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if rerr == io.EOF {
			return data, true, nil
		}
		if rerr != nil {
			return data, false, rerr
		}
	}
}

// replayBody is the body the upstream reads on the first attempt.
type replayBody struct {
	src  io.ReadCloser // the caller's body, as requestBody wraps it
	pool *replayPool
	max  int64 // largest copy for one request

	mu     sync.Mutex
	chunks []*[replayChunk]byte
	n      int64 // bytes copied (while keep)
	keep   bool  // still copying
	eof    bool  // the whole body was read and copied
	closed bool  // the first attempt's body is closed
	refs   int   // readers still using the chunks: handler, first attempt, resend
	read   bool  // a Read happened: the caller's body is no longer whole
}

func newReplayBody(src io.ReadCloser, pool *replayPool, max int64) *replayBody {
	return &replayBody{src: src, pool: pool, max: max, keep: true, refs: 2}
}

func (b *replayBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.read = true
	b.mu.Unlock()
	n, err := b.src.Read(p)
	b.mu.Lock()
	if b.keep && n > 0 {
		b.copyLocked(p[:n])
	}
	if err == io.EOF && b.keep {
		b.eof = true
	}
	b.mu.Unlock()
	return n, err
}

// copyLocked appends p to the copy, or gives the copy up when it would pass
// the request's or the process's cap.
func (b *replayBody) copyLocked(p []byte) {
	if b.n+int64(len(p)) > b.max {
		b.dropLocked()
		return
	}
	for len(p) > 0 {
		off := int(b.n % replayChunk)
		if b.n == int64(len(b.chunks))*replayChunk { // the last chunk is full (sendTo may leave an empty one)
			c := b.pool.get()
			if c == nil {
				b.dropLocked()
				return
			}
			b.chunks = append(b.chunks, c)
		}
		k := copy(b.chunks[len(b.chunks)-1][off:], p)
		p = p[k:]
		b.n += int64(k)
	}
}

func (b *replayBody) dropLocked() {
	b.keep = false
	for _, c := range b.chunks {
		b.pool.put(c)
	}
	b.chunks = nil
	b.n = 0
}

// Close ends the first attempt's use of the body (idempotent: the transport
// and the server may both close it).
func (b *replayBody) Close() error {
	err := b.src.Close()
	b.attemptDone()
	return err
}

// attemptDone ends the first attempt's use of the copy without closing the
// caller's body (idempotent). The handler calls it once the forward has
// returned, because the transport never closes this body: the forward
// hands it a wrapper (guardedBody) whose Close does nothing but refuse
// later Reads. A
// Read already under way when the copy is given up finds keep false and
// copies nothing.
func (b *replayBody) attemptDone() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		b.unrefLocked()
	}
	b.mu.Unlock()
}

// done is the handler's release: no resend can start after it.
func (b *replayBody) done() {
	b.mu.Lock()
	b.unrefLocked()
	b.mu.Unlock()
}

func (b *replayBody) unrefLocked() {
	if b.refs--; b.refs == 0 && b.keep {
		b.dropLocked()
	}
}

// untouched reports whether nothing of the caller's body was read yet: an
// attempt that had no connection can send the body itself again.
func (b *replayBody) untouched() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.read
}

// getBody is the request's GetBody: a reader over the whole copy, only when
// the first attempt read the body to its end with the copy intact.
func (b *replayBody) getBody() (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.eof || !b.keep || b.refs == 0 {
		return nil, errNotReplayable
	}
	b.refs++
	return &replayReader{b: b, size: b.n}, nil
}

// replayReader reads the copy for a resend.
type replayReader struct {
	b      *replayBody
	off    int64
	size   int64
	closed bool
}

func (r *replayReader) Read(p []byte) (int, error) {
	// Under the lock: a transport may still read a body it has already
	// closed (HTTP/2 closes it from another goroutine), and once every
	// reference is gone the chunks belong to the pool and other requests.
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if r.closed || !r.b.keep { // released: the chunks may be another request's
		return 0, io.ErrClosedPipe
	}
	if r.off >= r.size { // an empty body has no chunks at all
		return 0, io.EOF
	}
	c := r.b.chunks[r.off/replayChunk]
	start := int(r.off % replayChunk)
	end := replayChunk
	if rest := r.size - (r.off - int64(start)); rest < replayChunk {
		end = int(rest)
	}
	n := copy(p, c[start:end])
	r.off += int64(n)
	return n, nil
}

func (r *replayReader) Close() error {
	r.b.mu.Lock()
	if !r.closed {
		r.closed = true
		r.b.unrefLocked()
	}
	r.b.mu.Unlock()
	return nil
}
