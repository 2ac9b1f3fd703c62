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
// body with a copy send itself (bodySender).
type upstreamConn struct{ net.Conn }

// bodySender is a request body that can write n of its bytes to w itself.
type bodySender interface {
	sendTo(w io.Writer, n int64) (int64, error)
}

// ReadFrom is where net/http's transport writes a request body of known
// length: io.Copy finds it on the connection, and hands it the body in an
// io.LimitedReader.
func (c *upstreamConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if s, ok := lr.R.(bodySender); ok {
			n, err := s.sendTo(c.Conn, lr.N)
			lr.N -= n
			return n, err
		}
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r) // the connection's own (splice, sendfile)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// writerOnly hides a writer's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// sendTo is the outgoing body's sendTo: the copy's, while the exchange is
// on; then, or without a copy, an ordinary copy through this guard, which
// stops at the exchange's end.
func (b *guardedBody) sendTo(w io.Writer, n int64) (int64, error) {
	var sent int64
	if rb, ok := b.rc.(*replayBody); ok {
		m, err := rb.sendTo(w, n, &b.closed)
		if !errors.Is(err, errCopyGone) {
			return m, err
		}
		sent = m
	}
	m, err := io.Copy(writerOnly{w}, io.LimitReader(b, n-sent))
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
		var werr error
		if m > 0 {
			_, werr = w.Write(c[:m])
			sent += int64(m)
		}

		b.mu.Lock()
		if b.keep {
			if b.n += int64(m); b.n > b.max {
				b.dropLocked()
			} else if rerr == io.EOF {
				b.eof = true
			}
		}
		b.unrefLocked()
		b.mu.Unlock()
		switch {
		case werr != nil:
			return sent, werr
		case rerr == io.EOF:
			return sent, nil // short: the transport reports the length mismatch
		case rerr != nil:
			return sent, rerr
		}
	}
	return sent, nil
}
