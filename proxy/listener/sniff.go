package listener

import (
	"bytes"
	"strconv"
)

// sniffState is where the sniffer is in the connection's stream of HTTP/1
// messages: scan moves it along as bytes arrive, endHead and endLine at the
// end of a head or of a line of chunked framing.
type sniffState uint8

const (
	stHead        sniffState = iota // inside a request head (held until complete)
	stBody                          // counting Content-Length bytes
	stChunkSize                     // reading a chunk-size line
	stChunkData                     // counting chunk data
	stChunkCRLF                     // the line end after chunk data
	stTrailer                       // trailer section after the last chunk
	stPassthrough                   // gave up interpreting; the connection is dying anyway
	stRefused                       // a stand-in request replaced the rest: drop what follows
)

// scan advances ready over every byte whose meaning is settled.
func (c *framingConn) scan() {
	for c.ready < c.end {
		switch c.state {
		case stPassthrough, stRefused:
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
			//
			// The first line end found while the request line is unchecked
			// ends the request line (earlier searches saw none): it is
			// checked there, once per head, so a line without a version is
			// answered when it ends rather than when the head would.
			stop := -1
			for k := c.ready + max(c.headSeen-2, 0); k < c.end; {
				n := bytes.IndexByte(c.buf[k:c.end], '\n')
				if n < 0 {
					break
				}
				k += n + 1
				if !c.lineChecked {
					if k-c.ready > MaxHeaderBytes {
						c.refuse(HeadTooLarge, nil)
						return
					}
					line := c.buf[c.ready:k]
					if v := checkRequestLine(line); v != Passed {
						c.refuse(v, line)
						return
					}
					c.lineChecked = true
				}
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
				if c.headSeen > MaxHeaderBytes {
					c.refuse(HeadTooLarge, c.requestLine())
				}
				return
			}
			if stop-c.ready > MaxHeaderBytes {
				c.refuse(HeadTooLarge, c.requestLine())
				return
			}
			c.headSeen, c.lineChecked = 0, false
			if !c.endHead(c.buf[c.ready:stop]) {
				return // refused: a stand-in replaced the head and the rest
			}
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
