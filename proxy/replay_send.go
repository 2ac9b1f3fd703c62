package proxy

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
)

// An upload that streams with a copy for a resend (replay.go) would cross
// memory twice: net/http's transport reads it into a buffer of its own and
// writes it upstream from there, and the copy takes the same bytes again
// into a chunk. On a plain-HTTP upstream connection the transport hands the
// body to the connection's ReadFrom, and there the body is read straight
// into the copy's chunks and written upstream from them: no buffer between,
// no second pass (docs/performance.md). A TLS connection encrypts from what
// it is given, so there the transport's own loop, and the copy, stay.

// errCopyGone reports that sendTo stopped because no copy is kept any
// more: the rest of the body goes the ordinary way.
var errCopyGone = errors.New("proxy: no copy kept")

// upstreamConn is a connection to the upstream (or its proxy) as the
// transport dials it: the plain connection with a ReadFrom that lets a
// body with a copy send itself (bodySender), and sends every other body
// through a pooled buffer.
type upstreamConn struct {
	net.Conn
	bufs *sendBufPool
}

// sendBufPool lends the buffers of bodies sent without a copy.
type sendBufPool = arrayPool[[sendBufSize]byte]

func newSendBufPool() *sendBufPool { return newArrayPool[[sendBufSize]byte]() }

// bodySender is a request body that can write n of its bytes to w itself;
// bufs lends the buffer for what it sends without a copy.
type bodySender interface {
	sendTo(w io.Writer, n int64, bufs *sendBufPool) (int64, error)
}

// ReadFrom is where net/http's transport writes a request body of known
// length: io.Copy finds it on the connection, and hands it the body in an
// io.LimitedReader. The connection's own ReadFrom (splice, sendfile) never
// applies to a request body, and would copy through a fresh 32 KiB buffer
// per body: garbage that made an upload's collections much of what the
// gateway spent beyond a bare proxy (docs/performance.md).
func (c *upstreamConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if s, ok := lr.R.(bodySender); ok {
			n, err := s.sendTo(c.Conn, lr.N, c.bufs)
			lr.N -= n
			return n, err
		}
	}
	buf := c.bufs.get()
	defer c.bufs.put(buf)
	return copySplit(c.Conn, r, buf[:])
}

// sendBufSize is the size of the reads a body of known length is sent
// upstream through, with or without a copy (replayChunk is the same):
// 64 KiB reads from the caller take an upload in half as many read(2)s.
// sendWriteMax is the size of the writes upstream: net/http's own, since
// larger writes overrun the receiver's window (docs/performance.md).
const (
	sendBufSize  = 64 << 10
	sendWriteMax = 32 << 10
)

var errInvalidWrite = errors.New("proxy: invalid write result")

// writeSplit writes p to w in writes of at most sendWriteMax bytes.
func writeSplit(w io.Writer, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		end := min(n+sendWriteMax, len(p))
		k, err := w.Write(p[n:end])
		if k < 0 || k > end-n {
			return n, errInvalidWrite
		}
		n += k
		if err != nil {
			return n, err
		}
		if n < end {
			return n, io.ErrShortWrite
		}
	}
	return n, nil
}

// copySplit copies r to w until r's end through buf, in writeSplit's
// writes.
func copySplit(w io.Writer, r io.Reader, buf []byte) (int64, error) {
	var sent int64
	for {
		m, rerr := r.Read(buf)
		k, werr := writeSplit(w, buf[:m])
		sent += int64(k)
		if done, err := stepEnd(rerr, werr); done {
			return sent, err
		}
	}
}

// stepEnd tells whether a send stops after a step that read with rerr and
// wrote with werr, and with what error: none at the body's end, which may
// come short (the transport reports the length mismatch).
func stepEnd(rerr, werr error) (bool, error) {
	switch {
	case werr != nil:
		return true, werr
	case rerr == io.EOF:
		return true, nil
	case rerr != nil:
		return true, rerr
	}
	return false, nil
}

// sendTo is the outgoing body's sendTo: the copy's, while the exchange is
// on; then, or without a copy, an ordinary copy through this guard, which
// stops at the exchange's end, in a buffer taken only then.
func (b *guardedBody) sendTo(w io.Writer, n int64, bufs *sendBufPool) (int64, error) {
	var sent int64
	if rb, ok := b.rc.(*replayBody); ok {
		m, err := rb.sendTo(w, n, &b.closed)
		if !errors.Is(err, errCopyGone) {
			return m, err
		}
		sent = m
	}
	buf := bufs.get()
	defer bufs.put(buf)
	m, err := copySplit(w, &io.LimitedReader{R: b, N: n - sent}, buf[:])
	return sent + m, err
}

// sendTo reads at most n bytes of the caller's body into the copy's chunks
// and writes them to w from there. While a chunk is being filled and
// written, sendTo holds a reference on the copy, so that a handler that
// finishes meanwhile (the upstream answered before the body was sent)
// cannot hand the chunk to another request under it. It stops, with
// errCopyGone, when the copy is given up (the cap, or the exchange's end);
// closed is the outgoing body's guard.
func (b *replayBody) sendTo(w io.Writer, n int64, closed *atomic.Bool) (int64, error) {
	var sent int64
	for sent < n {
		if closed.Load() {
			return sent, errBodyClosed
		}
		b.mu.Lock()
		b.read = true
		off := int(b.n % replayChunk)
		// A new chunk only when the last is full: a Read of nothing leaves
		// the one taken for it empty, and it is filled next time.
		if b.keep && b.refs > 0 && b.n == int64(len(b.chunks))*replayChunk {
			if c := b.pool.get(); c != nil {
				b.chunks = append(b.chunks, c)
			} else {
				b.dropLocked()
			}
		}
		if !b.keep || b.refs == 0 {
			b.mu.Unlock()
			return sent, errCopyGone
		}
		b.refs++
		c := b.chunks[len(b.chunks)-1][off:]
		b.mu.Unlock()

		m, rerr := b.src.Read(c[:min(int64(len(c)), n-sent)])

		// The copy counts the bytes, and knows it is whole, before they
		// go upstream: an upstream that has the whole body may answer
		// (a 401, a vendor 429) before this goroutine runs again, and
		// the resend must find the copy complete. Giving the copy up
		// waits until the chunk is written: it hands the chunk back.
		b.mu.Lock()
		over := b.keep && b.n+int64(m) > b.max
		if b.keep && !over {
			b.n += int64(m)
			if rerr == io.EOF {
				b.eof = true
			}
		}
		b.mu.Unlock()

		k, werr := writeSplit(w, c[:m])
		sent += int64(k)

		b.mu.Lock()
		if over && b.keep {
			b.dropLocked()
		}
		b.unrefLocked()
		b.mu.Unlock()
		if done, err := stepEnd(rerr, werr); done {
			return sent, err
		}
	}
	return sent, nil
}
