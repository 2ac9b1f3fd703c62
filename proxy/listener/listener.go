// Package listener is the proxy listener's connection layer, beneath
// net/http's server: a framing sniffer on every connection, the TLS
// listener that puts the sniffer under the TLS plaintext (tls.go), and the
// server both are served with (server.go).
//
// Go's HTTP/1 server quietly resolves the two framings request smugglers
// play with: it drops Content-Length when Transfer-Encoding: chunked is
// present, and answers any other Transfer-Encoding with a plain-text 501
// before a handler runs. The gateway refuses both with 400 invalid_request
// in its envelope and closes the connection (docs/security.md, Framing). So
// a thin reader sits under the server: it follows HTTP/1 message framing
// (sniff.go), holds each request head until it is complete, and, when the
// head carries a Transfer-Encoding the gateway refuses, renames that header
// in place (same length, so no other byte moves). The server then frames
// the message by Content-Length alone (or as bodiless), and the handler,
// asking its Conn for the verdict (ConnOf), refuses the request.
//
// The same reader answers what Go's server would answer in plain text,
// late, or not at all, where the gateway answers in its envelope at once
// (docs/security.md): a request line that is not METHOD target HTTP/x.y
// (Go sees it only once the head ends, which for "GET /path\r\n" may be
// never), an HTTP version other than 1.0 and 1.1, a head over
// MaxHeaderBytes (which must not be buffered whole), and the heads Go's
// server refuses for their fields (head.go). For these it checks the
// request line as soon as it ends and counts the held head; on a refusal it
// hands the server, in place of the head and everything after it, a small
// stand-in request that carries the verdict, and drops everything after it
// (verdict.go). The handler answers the stand-in in its envelope and the
// connection closes.
package listener

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// sniffBufSize is the sniffer's buffer on a new connection: the size
	// of the server's own read buffer, which almost every request head fits
	// in. Every open connection holds one, so it is kept small; a longer
	// head grows it (up to maxSniffBuf), and a body read while nothing is
	// held goes straight into the server's buffer instead.
	sniffBufSize = 4 << 10
	// maxSniffBuf bounds the sniffer's buffer: a held head is refused once
	// it passes MaxHeaderBytes, so it always fits.
	maxSniffBuf = 2 * MaxHeaderBytes
	// lingerTimeout is how long a connection whose head was refused keeps
	// reading (and dropping) what the client still sends after the answer,
	// so that closing with unread data does not reset the connection before
	// the client has read the answer. Go's server waits as long after its
	// own early refusals.
	lingerTimeout = 500 * time.Millisecond
)

// Wrap makes every accepted connection of ln pass through the framing sniffer.
func Wrap(ln net.Listener) net.Listener { return &framingListener{ln, newHoldPool()} }

type framingListener struct {
	net.Listener
	holds *sync.Pool // the held writes' memory (Conn.HoldWrites), shared by the connections
}

func (l *framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fc := newFramingConn(c, sniffBufSize)
	fc.holds = l.holds
	return fc, nil
}

// framingConn is a net.Conn whose reads go through the framing sniffer.
type framingConn struct {
	net.Conn
	buf   []byte // buf[r:ready] can be returned; buf[ready:end] is held or unscanned
	r     int
	ready int
	end   int
	err   error // read error to report once buffered bytes are returned

	state    sniffState
	remain   int64 // bytes left in a body or chunk
	lineBuf  []byte
	headSeen int // bytes of the held head already searched for its end
	// lineChecked: the held head's request line ended and passed.
	lineChecked bool

	out int64 // bytes returned by Read so far
	// settled, stored after every Read: every byte read from the socket so
	// far belongs to a complete message (no head held, no body or chunk
	// pending). The handler of an HTTP/1 request reads it: when set, the
	// request's body is already in memory, so reading it cannot block and
	// needs no read deadline (two timer updates saved on most requests).
	settled   atomic.Bool
	refusedAt int64       // output offset of the stand-in request; -1 if none (for tests)
	linger    atomic.Bool // Close must linger: a head was refused with bytes unread

	// verdicts are the sniffer's verdicts on the heads it handed the
	// server, in order, not yet taken by their requests' handlers
	// (Conn.Verdict). HTTP/1 serves one request of a connection at a time, in
	// the order of its heads, so the handler of the n-th request takes the
	// n-th verdict, however far the sniffer has read ahead (pipelining).
	vmu      sync.Mutex
	verdicts []Verdict

	// holds is where a hold's memory comes from; nil where writes are
	// never held (under TLS). held is the hold of the request being
	// answered, nil when none (hold.go). The goroutine serving the
	// connection sets and clears it; Write reads it, also from the two
	// other goroutines that write to a connection (a 100 Continue, a
	// relayed 1xx), which net/http and the handler stop before a hold
	// begins (Conn.HoldWrites).
	holds   *sync.Pool
	held    *heldWrite
	holdGen uint64 // holds begun on the connection, so a Held knows its own
}

// pushVerdict records the verdict on the head just handed on.
func (c *framingConn) pushVerdict(v Verdict) {
	c.vmu.Lock()
	c.verdicts = append(c.verdicts, v)
	c.vmu.Unlock()
}

// popVerdict takes the verdict on the oldest head not yet taken.
func (c *framingConn) popVerdict() Verdict {
	c.vmu.Lock()
	defer c.vmu.Unlock()
	if len(c.verdicts) == 0 {
		return Passed // cannot happen: every head the server reads has its verdict
	}
	v := c.verdicts[0]
	// Shifted down rather than resliced: the array stays the connection's,
	// so the next head's push allocates nothing. Almost always one is
	// queued; pipelining queues at most the heads in what the sniffer and
	// the server have read ahead (up to maxSniffBuf and net/http's 4 KiB).
	c.verdicts = c.verdicts[:copy(c.verdicts, c.verdicts[1:])]
	return v
}

func newFramingConn(c net.Conn, bufSize int) *framingConn {
	return &framingConn{Conn: c, buf: make([]byte, bufSize), refusedAt: -1}
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.read(p)
	c.settled.Store(c.state == stHead && c.ready == c.end && c.err == nil)
	return n, err
}

// bodyInMemory reports whether the body of the request being served on c
// was read whole from the socket (see settled).
func (c *framingConn) bodyInMemory() bool { return c.settled.Load() }

func (c *framingConn) read(p []byte) (int, error) {
	for {
		if c.r < c.ready {
			n := copy(p, c.buf[c.r:c.ready])
			c.r += n
			c.out += int64(n)
			return n, nil
		}
		if c.state == stRefused {
			return c.discard()
		}
		if c.err != nil {
			// Errors are reported once, not kept: the server aborts its
			// background read with a past deadline and then reads on.
			err := c.err
			c.err = nil
			var ne net.Error
			if c.ready < c.end && !(errors.As(err, &ne) && ne.Timeout()) {
				// The peer is gone with a head incomplete: hand it over as is.
				c.ready, c.headSeen, c.lineChecked = c.end, 0, false
				c.err = err
				continue
			}
			return 0, err
		}
		// A body with a known length, nothing held: read it straight into
		// the caller's buffer, at the caller's size, with no copy through
		// ours. (The body of a 1 MiB upload is most of what crosses here.)
		if c.state == stBody && c.ready == c.end && len(p) > 0 {
			c.r, c.ready, c.end = 0, 0, 0
			n, err := c.Conn.Read(p[:min(int64(len(p)), c.remain)])
			c.remain -= int64(n)
			c.out += int64(n)
			if c.remain == 0 {
				c.state = stHead
			}
			if err != nil && n > 0 {
				c.err = err // reported by the next Read, as on the buffered path
				err = nil
			}
			return n, err
		}
		// Everything returnable was returned: keep only the held bytes.
		if c.ready > 0 {
			held := copy(c.buf, c.buf[c.ready:c.end])
			c.r, c.ready, c.end = 0, 0, held
		}
		if c.end == len(c.buf) {
			if len(c.buf) >= maxSniffBuf {
				// Cannot happen (scan refuses a head before it fills the
				// buffer), but the bound on memory must not rest on that.
				c.refuse(HeadTooLarge, nil)
				continue
			}
			nb := make([]byte, min(2*len(c.buf), maxSniffBuf))
			copy(nb, c.buf[:c.end])
			c.buf = nb
		}
		n, err := c.Conn.Read(c.buf[c.end:])
		c.end += n
		c.err = err
		c.scan()
	}
}

// discard reads, and drops, what the client sends after a refused head
// until the connection reports an error. It must not report io.EOF on its
// own: the server takes that for a client gone, and would cancel a request
// still in flight ahead of the refused one.
func (c *framingConn) discard() (int, error) {
	if c.lineBuf == nil {
		c.lineBuf = make([]byte, 4<<10)
	}
	for {
		if _, err := c.Conn.Read(c.lineBuf[:cap(c.lineBuf)]); err != nil {
			return 0, err
		}
	}
}

// Close closes the connection; after a refused head it first half-closes
// and drops what the client still sends, for at most lingerTimeout, so the
// answer is not lost to a reset (see lingerTimeout).
func (c *framingConn) Close() error {
	if c.linger.CompareAndSwap(true, false) {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
			_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTimeout))
			var scratch [4 << 10]byte
			for {
				if _, err := c.Conn.Read(scratch[:]); err != nil {
					break
				}
			}
		}
	}
	return c.Conn.Close()
}
