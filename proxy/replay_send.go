package proxy

import (
	"errors"
	"io"
	"net"
	"sync/atomic"

	"github.com/faxgate/faxgate/internal/base/vecio"
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
	send sender
}

// sender is what a connection sends bodies with: the transport's buffers,
// and its own memory for a gathered write, used by one body at a time (the
// transport's write loop), so that a body sends without allocating.
type sender struct {
	bufs *sendBufPool
	vecs [sendGather][]byte
	nb   net.Buffers
}

// sendBufPool lends the buffers of bodies sent without a copy, and keeps
// count of the extra ones gathering borrows (sendGatherBudget).
type sendBufPool struct {
	arrayPool[[sendBufSize]byte]
	extra atomic.Int64
}

func newSendBufPool() *sendBufPool {
	p := &sendBufPool{}
	p.init()
	return p
}

// borrow lends a buffer beyond a body's first, for gathering; nil when
// sendGatherBudget of them are out.
func (p *sendBufPool) borrow() *[sendBufSize]byte {
	if p.extra.Add(1) > sendGatherBudget {
		p.extra.Add(-1)
		return nil
	}
	return p.get()
}

func (p *sendBufPool) giveBack(b *[sendBufSize]byte) {
	p.put(b)
	p.extra.Add(-1)
}

// bodySender is a request body that can write n of its bytes to w itself;
// s lends the buffers for what it sends without a copy.
type bodySender interface {
	sendTo(w io.Writer, n int64, s *sender) (int64, error)
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
			n, err := s.sendTo(c.Conn, lr.N, &c.send)
			lr.N -= n
			return n, err
		}
	}
	return c.send.copy(c.Conn, r)
}

// sendBufSize is the size of the reads a body of known length is sent
// upstream through, with or without a copy (replayChunk is the same):
// 64 KiB reads from the caller take an upload in half as many read(2)s as
// net/http's 32 KiB. While those reads come back full, up to sendGather of
// them go upstream together, in one writev(2) of up to sendWriteMax: a
// quarter as many writes took a tenth off the gateway's CPU per upload,
// and off the machine's (each write on loopback also wakes the upstream's
// reader: docs/performance.md). A read that comes back short is written at
// once. A full read does not promise more bytes: a caller that pauses
// right after one leaves what was gathered unsent until its next bytes, or
// until read_timeout cuts the body off. The buffers gathering borrows
// beyond a body's first (sendGatherBudget per transport, 4 MiB) bound what
// such pauses can hold; with the budget spent, full reads go out one at a
// time.
const (
	sendBufSize      = 64 << 10
	sendGather       = 4
	sendWriteMax     = sendGather * sendBufSize
	sendGatherBudget = 64
)

// copy copies r to w until r's end, reading into buffers of s.bufs and
// writing what up to sendGather full reads gathered in one vecio.Write. It
// holds one buffer while it waits for the caller, and the others, borrowed
// under sendGatherBudget, from a full read until the write.
func (s *sender) copy(w io.Writer, r io.Reader) (int64, error) {
	first := s.bufs.get()
	defer s.bufs.put(first)
	var more [sendGather - 1]*[sendBufSize]byte
	var sent int64
	for {
		vec := s.vecs[:0]
		var rerr error
		buf := first
		for i := 0; ; i++ {
			m, err := r.Read(buf[:])
			if m > 0 {
				vec = append(vec, buf[:m])
			}
			if rerr = err; err != nil || m < sendBufSize || i == len(more) {
				break
			}
			if more[i] = s.bufs.borrow(); more[i] == nil {
				break
			}
			buf = more[i]
		}
		k, werr := vecio.Write(w, vec, &s.nb)
		sent += k
		clear(s.vecs[:])
		for i, b := range more {
			if b != nil {
				s.bufs.giveBack(b)
				more[i] = nil
			}
		}
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
func (b *guardedBody) sendTo(w io.Writer, n int64, s *sender) (int64, error) {
	var sent int64
	if rb, ok := b.rc.(*replayBody); ok {
		m, err := rb.sendTo(w, n, &b.closed, s)
		if !errors.Is(err, errCopyGone) {
			return m, err
		}
		sent = m
	}
	m, err := s.copy(w, &io.LimitedReader{R: b, N: n - sent})
	return sent + m, err
}

// sendTo reads at most n bytes of the caller's body into the copy's chunks
// and writes them to w from there, up to sendGather chunks at a time
// (gather). While chunks are being filled and written, sendTo holds a
// reference on the copy, so that a handler that finishes meanwhile (the
// upstream answered before the body was sent) cannot hand them to another
// request under it. It stops, with errCopyGone, when the copy is given up
// (the cap, or the exchange's end); closed is the outgoing body's guard.
func (b *replayBody) sendTo(w io.Writer, n int64, closed *atomic.Bool, s *sender) (int64, error) {
	var sent int64
	for sent < n {
		if closed.Load() {
			return sent, errBodyClosed
		}
		b.mu.Lock()
		b.read = true
		if !b.keep || b.refs == 0 {
			b.mu.Unlock()
			return sent, errCopyGone
		}
		b.refs++
		b.mu.Unlock()

		vec, over, full, rerr := b.gather(n-sent, closed, s.vecs[:0])
		k, werr := vecio.Write(w, vec, &s.nb)
		sent += k
		clear(s.vecs[:])

		b.mu.Lock()
		gone := b.keep && (over || full)
		if gone {
			b.dropLocked()
		}
		b.unrefLocked()
		b.mu.Unlock()
		if done, err := stepEnd(rerr, werr); done {
			return sent, err
		}
		if full {
			return sent, errCopyGone // the rest goes without a copy
		}
	}
	return sent, nil
}

// gather reads at most n bytes into the copy's chunks, one read per chunk,
// going on to the next chunk while reads come back full, up to sendGather,
// and returns what was read, for one write. The copy counts the bytes, and
// knows it is whole, before they go upstream: an upstream that has the
// whole body may answer (a 401, a vendor 429) before this goroutine runs
// again, and the resend must find the copy complete. over reports a read
// that took the copy past its cap: its bytes are in vec but not counted,
// and the copy is given up once they are written, since that hands the
// chunks back. full reports that no chunk was left under the cap, and
// nothing was read. Gathering stops at the exchange's end (closed): what
// was read goes out, and the next step stops. One sendTo runs per body at
// a time (the transport's write loop), and nothing else reads the body
// meanwhile.
func (b *replayBody) gather(n int64, closed *atomic.Bool, vec [][]byte) (_ [][]byte, over, full bool, rerr error) {
	for got := int64(0); len(vec) < sendGather && got < n; {
		if got > 0 && closed.Load() {
			break
		}
		b.mu.Lock()
		if !b.keep { // given up: sendTo finds out next
			b.mu.Unlock()
			break
		}
		// A new chunk only when the last is full: a Read of nothing leaves
		// the one taken for it empty, and it is filled next time.
		if b.n == int64(len(b.chunks))*replayChunk {
			c := b.pool.get()
			if c == nil {
				b.mu.Unlock()
				return vec, false, len(vec) == 0, nil
			}
			b.chunks = append(b.chunks, c)
		}
		c := b.chunks[len(b.chunks)-1][b.n%replayChunk:]
		b.mu.Unlock()

		m, err := b.src.Read(c[:min(int64(len(c)), n-got)])

		b.mu.Lock()
		over = b.keep && b.n+int64(m) > b.max
		if b.keep && !over {
			b.n += int64(m)
			if err == io.EOF {
				b.eof = true
			}
		}
		b.mu.Unlock()
		if m > 0 {
			vec = append(vec, c[:m])
		}
		got += int64(m)
		if over || err != nil || m < len(c) {
			return vec, over, false, err
		}
	}
	return vec, false, false, nil
}
