package proxy

import (
	"bytes"
	"errors"
	"net"
	"strconv"

	"github.com/faxgate/faxgate/internal/ascii"
)

// Go's HTTP/1 server quietly resolves the two framings request smugglers
// play with: it drops Content-Length when Transfer-Encoding: chunked is
// present, and answers any other Transfer-Encoding with a plain-text 501
// before a handler runs. The contract wants both refused with 400
// invalid_request in the gateway's envelope and the connection closed. So a
// thin reader sits under the server: it follows HTTP/1 message framing, holds
// each request head until it is complete, and, when the head carries a
// Transfer-Encoding the gateway refuses, renames that header in place to
// framingMarker (same length, so no other byte moves). The server then frames
// the message by Content-Length alone (or as bodiless), and the handler sees
// the marker and refuses the request.

const (
	sniffBufSize = 16 << 10
	// maxSniffHead bounds a held request head. Beyond it the reader stops
	// interpreting and passes bytes through; the server's own header limit
	// (well below this) rejects such a head and closes the connection.
	maxSniffHead = 256 << 10
)

type sniffState uint8

const (
	stHead        sniffState = iota // inside a request head (held until complete)
	stBody                          // counting Content-Length bytes
	stChunkSize                     // reading a chunk-size line
	stChunkData                     // counting chunk data
	stChunkCRLF                     // the line end after chunk data
	stTrailer                       // trailer section after the last chunk
	stPassthrough                   // gave up interpreting; the connection is dying anyway
)

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
}

// WrapListener makes every accepted connection pass through the framing sniffer.
func WrapListener(ln net.Listener) net.Listener { return &framingListener{ln} }

type framingListener struct{ net.Listener }

func (l *framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c, buf: make([]byte, sniffBufSize)}, nil
}

func (c *framingConn) Read(p []byte) (int, error) {
	for {
		if c.r < c.ready {
			n := copy(p, c.buf[c.r:c.ready])
			c.r += n
			return n, nil
		}
		if c.err != nil {
			// Errors are reported once, not kept: the server aborts its
			// background read with a past deadline and then reads on.
			err := c.err
			c.err = nil
			var ne net.Error
			if c.ready < c.end && !(errors.As(err, &ne) && ne.Timeout()) {
				// The peer is gone with a head incomplete: hand it over as is.
				c.ready, c.headSeen = c.end, 0
				c.err = err
				continue
			}
			return 0, err
		}
		// Everything returnable was returned: keep only the held bytes.
		if c.ready > 0 {
			held := copy(c.buf, c.buf[c.ready:c.end])
			c.r, c.ready, c.end = 0, 0, held
		}
		if c.end == len(c.buf) {
			if len(c.buf) >= maxSniffHead {
				c.state = stPassthrough
				c.ready = c.end
				continue
			}
			nb := make([]byte, 2*len(c.buf))
			copy(nb, c.buf[:c.end])
			c.buf = nb
		}
		n, err := c.Conn.Read(c.buf[c.end:])
		c.end += n
		c.err = err
		c.scan()
	}
}

// scan advances ready over every byte whose meaning is settled.
func (c *framingConn) scan() {
	for c.ready < c.end {
		switch c.state {
		case stPassthrough:
			c.ready = c.end
		case stHead:
			// Empty lines before a request line: nothing to hold. (Go's
			// server skips up to four CR or LF after a POST and fails the
			// request on any other.) Only these bytes go: what follows them
			// is a head, held until complete.
			for c.ready < c.end && (c.buf[c.ready] == '\r' || c.buf[c.ready] == '\n') {
				c.ready++
			}
			// Search only what the last search did not cover (a head
			// trickling in byte by byte must not be rescanned each time),
			// less two bytes for an end split across reads, and stop at
			// the first empty line (searching the whole buffer for
			// "\n\n" made every pipelined head cost the buffer's length).
			stop := -1
			for k := c.ready + max(c.headSeen-2, 0); k < c.end; {
				n := bytes.IndexByte(c.buf[k:c.end], '\n')
				if n < 0 {
					break
				}
				k += n + 1
				if k < c.end && c.buf[k] == '\n' {
					stop = k + 1
					break
				}
				if k+1 < c.end && c.buf[k] == '\r' && c.buf[k+1] == '\n' {
					stop = k + 2
					break
				}
			}
			if stop < 0 {
				c.headSeen = c.end - c.ready
				return
			}
			c.headSeen = 0
			c.endHead(c.buf[c.ready:stop])
			c.ready = stop
		case stBody:
			n := min(int64(c.end-c.ready), c.remain)
			c.ready += int(n)
			c.remain -= n
			if c.remain == 0 {
				c.state = stHead
			}
		case stChunkData:
			n := min(int64(c.end-c.ready), c.remain)
			c.ready += int(n)
			c.remain -= n
			if c.remain == 0 {
				c.state = stChunkCRLF
			}
		case stChunkSize, stChunkCRLF, stTrailer:
			k := bytes.IndexByte(c.buf[c.ready:c.end], '\n')
			if k < 0 {
				c.lineBuf = append(c.lineBuf, c.buf[c.ready:c.end]...)
				c.ready = c.end
				if len(c.lineBuf) > 4096 {
					c.state = stPassthrough // the server rejects such a line itself
				}
				return
			}
			line := append(c.lineBuf, c.buf[c.ready:c.ready+k]...)
			c.lineBuf = c.lineBuf[:0]
			c.ready += k + 1
			c.endLine(bytes.TrimSuffix(line, []byte("\r")))
		}
	}
}

// endLine handles one complete line of chunked framing.
func (c *framingConn) endLine(line []byte) {
	switch c.state {
	case stChunkCRLF:
		c.state = stChunkSize
	case stChunkSize:
		if k := bytes.IndexByte(line, ';'); k >= 0 {
			line = line[:k]
		}
		size, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 63)
		switch {
		case err != nil:
			c.state = stPassthrough // malformed: the server fails the request and closes
		case size == 0:
			c.state = stTrailer
		default:
			c.state, c.remain = stChunkData, int64(size)
		}
	case stTrailer:
		if len(line) == 0 {
			c.state = stHead
		}
	}
}

// endHead inspects a complete request head, renames refused Transfer-Encoding
// headers in place, and sets the state for the body that follows. It reads
// header fields as Go's server does (net/textproto): one CR dropped before
// each LF, names matched in ASCII case only, values trimmed of spaces and
// tabs only, obs-fold lines joined with one space. Anything looser lets a
// field Go frames by, or answers 501 to, pass unrefused.
func (c *framingConn) endHead(head []byte) {
	lines := bytes.Split(head, []byte("\n"))
	for len(lines) > 0 && len(bytes.TrimSpace(lines[0])) == 0 {
		lines = lines[1:] // empty lines before the request line
	}
	if len(lines) == 0 {
		return
	}
	http10 := bytes.HasSuffix(bytes.TrimRight(lines[0], "\r"), []byte("HTTP/1.0"))
	var teLines [][]byte
	var teValue []byte
	var clValues [][]byte
	const otherField, teField, clField = 0, 1, 2
	last := otherField
	for _, ln := range lines[1:] {
		ln = bytes.TrimSuffix(ln, []byte("\r"))
		if len(ln) == 0 {
			break
		}
		if ln[0] == ' ' || ln[0] == '\t' { // obs-fold continues the previous field
			switch last {
			case teField:
				teValue = append(append(teValue, ' '), trimOWS(ln)...)
			case clField:
				k := len(clValues) - 1
				clValues[k] = append(append(clValues[k], ' '), trimOWS(ln)...)
			}
			continue
		}
		last = otherField
		colon := bytes.IndexByte(ln, ':')
		if colon < 0 {
			continue
		}
		name, value := ln[:colon], trimOWS(ln[colon+1:])
		switch {
		case ascii.EqualFold(name, "Transfer-Encoding"):
			teLines = append(teLines, name)
			teValue = append([]byte(nil), value...) // a copy: folds append to it
			last = teField
		case ascii.EqualFold(name, "Content-Length"):
			clValues = append(clValues, append([]byte(nil), value...))
			last = clField
		}
	}
	cl, clSeen, clBad := int64(0), len(clValues) > 0, false
	for i, v := range clValues {
		n, err := strconv.ParseUint(string(trimOWS(v)), 10, 63)
		if err != nil || (i > 0 && int64(n) != cl) {
			clBad = true
		}
		cl = int64(n)
	}
	if clBad {
		c.state = stPassthrough // the server answers 400 and closes
		return
	}
	chunked := len(teLines) == 1 && ascii.EqualFold(bytes.TrimLeft(teValue, " \t"), "chunked")
	refuse := len(teLines) > 0 && (clSeen || !chunked)
	if refuse {
		for _, name := range teLines {
			copy(name, framingMarker) // same length: 17 bytes
		}
	}
	switch {
	case !refuse && chunked && !http10:
		c.state = stChunkSize
	case clSeen && cl > 0:
		c.state, c.remain = stBody, cl
	default:
		c.state = stHead
	}
}

// trimOWS trims what net/textproto trims around a field value.
func trimOWS(b []byte) []byte { return bytes.Trim(b, " \t") }
