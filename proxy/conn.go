package proxy

import (
	"bytes"
	"errors"
	"net"
	"strconv"
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

	state   sniffState
	remain  int64 // bytes left in a body or chunk
	lineBuf []byte
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
				c.ready = c.end
				c.err = err
				continue
			}
			return 0, err
		}
		// Everything returnable was returned: keep only the held bytes.
		held := copy(c.buf, c.buf[c.ready:c.end])
		c.r, c.ready, c.end = 0, 0, held
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
			i := bytes.Index(c.buf[c.ready:c.end], []byte("\n\r\n"))
			j := bytes.Index(c.buf[c.ready:c.end], []byte("\n\n"))
			stop := -1
			switch {
			case i >= 0 && (j < 0 || i < j):
				stop = c.ready + i + 3
			case j >= 0:
				stop = c.ready + j + 2
			}
			if stop < 0 {
				if c.ready == 0 && c.end >= 4 && isBlankStart(c.buf[:c.end]) {
					// Leading empty lines before a request line: nothing to hold.
					c.ready = c.end
				}
				return
			}
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

func isBlankStart(b []byte) bool { return b[0] == '\r' || b[0] == '\n' }

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
// headers in place, and sets the state for the body that follows.
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
	cl, clSeen, clBad := int64(0), false, false
	last := ""
	for _, ln := range lines[1:] {
		ln = bytes.TrimRight(ln, "\r")
		if len(ln) == 0 {
			break
		}
		if ln[0] == ' ' || ln[0] == '\t' { // obs-fold continues the previous field
			if last == "te" {
				teValue = append(append(teValue, ' '), bytes.TrimSpace(ln)...)
			}
			continue
		}
		colon := bytes.IndexByte(ln, ':')
		if colon < 0 {
			last = ""
			continue
		}
		name, value := ln[:colon], bytes.TrimSpace(ln[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			teLines = append(teLines, name)
			if len(teValue) > 0 {
				teValue = append(teValue, ',')
			}
			teValue = append(teValue, value...)
			last = "te"
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || (clSeen && n != cl) {
				clBad = true
			}
			cl, clSeen = n, true
			last = ""
		default:
			last = ""
		}
	}
	if clBad {
		c.state = stPassthrough // the server answers 400 and closes
		return
	}
	chunked := len(teLines) == 1 && bytes.EqualFold(bytes.TrimSpace(teValue), []byte("chunked"))
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
