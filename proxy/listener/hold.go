package listener

import (
	"io"
	"net"
	"sync"

	"github.com/faxgate/faxgate/internal/base/vecio"
)

// holdSize is the most a held write may be: the size of net/http's
// connection write buffer, whose flush is the write held.
const holdSize = 4 << 10

// heldWrite is a held write, in memory of its listener's pool for as long
// as the hold lasts.
type heldWrite struct {
	buf [holdSize]byte
	n   int // buf[:n] is held
	vec [2][]byte
	nb  net.Buffers
}

func newHoldPool() *sync.Pool {
	return &sync.Pool{New: func() any { return new(heldWrite) }}
}

// Held is a hold on the writes to a request's connection (Conn.HoldWrites).
// The zero Held holds nothing, and neither does one already released:
// it names its own hold, not whichever the connection has later.
type Held struct {
	c   *framingConn
	gen uint64 // the connection's holdGen when this hold began
}

// HoldWrites holds the writes to the connection until Release: a write of
// at most 4 KiB is kept, and goes out with the write after it in one
// writev(2), or at the release.
//
// The handler holds writes while it writes an answer it has whole in one
// Write. net/http first fills and flushes its 4 KiB connection buffer,
// which holds the head and the body's first bytes, then writes the rest
// directly: two writes become one. On loopback every write also runs the
// caller's side of TCP and wakes its reader, so this is the cheaper way
// (docs/performance.md).
//
// It holds nothing except on a plain TCP framing connection under HTTP/1
// (HTTP/2 and TLS write in frames and records of their own), and nothing
// while writes are held already.
//
// Only the goroutine serving the connection may hold its writes, and only
// once no other goroutine can write to it: after the answer's status is
// set (WriteHeader), when net/http sends no more 100 Continue (written by
// the goroutine that reads the request body), and after the round trip,
// when no more 1xx answers are relayed (written by the transport's).
func (c Conn) HoldWrites() Held {
	fc := c.fc
	if fc == nil || fc.holds == nil || fc.held != nil || !vecio.Gathers(fc.Conn) {
		return Held{}
	}
	fc.held = fc.holds.Get().(*heldWrite)
	fc.holdGen++
	return Held{fc, fc.holdGen}
}

// mine reports whether h's hold is the connection's current one (the pool
// may hand a later hold the same memory, so the generation tells them
// apart).
func (h Held) mine() bool { return h.c != nil && h.c.held != nil && h.c.holdGen == h.gen }

// Holding reports whether a write is held: the handler that flushes what
// net/http still buffers then sends it along with what is held.
func (h Held) Holding() bool { return h.mine() && h.c.held.n > 0 }

// Release ends the hold: what is held is written now, and the error is
// that write's. Releasing again does nothing.
func (h Held) Release() error {
	if !h.mine() {
		return nil
	}
	c := h.c
	hw := c.held
	c.held = nil
	defer c.holds.Put(hw)
	if hw.n == 0 {
		return nil
	}
	p := hw.buf[:hw.n]
	hw.n = 0
	n, err := c.Conn.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return err
}

// Write writes p to the connection. While writes are held, a write of at
// most holdSize bytes with nothing held is kept, and what is held goes out
// with the next write, in one vectored write. Bytes held are reported as
// written, so a failure to write them is the next call's error.
func (c *framingConn) Write(p []byte) (int, error) {
	hw := c.held
	if hw == nil {
		return c.Conn.Write(p)
	}
	if hw.n == 0 {
		if len(p) <= holdSize {
			hw.n = copy(hw.buf[:], p)
			return len(p), nil
		}
		return c.Conn.Write(p)
	}
	held := int64(hw.n)
	hw.n = 0
	hw.vec = [2][]byte{hw.buf[:held], p}
	n, err := vecio.Write(c.Conn, hw.vec[:], &hw.nb)
	hw.vec = [2][]byte{}
	if n < held {
		return 0, err
	}
	return int(n - held), err
}
