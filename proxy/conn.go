package proxy

import (
	"bytes"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/faxgate/faxgate/internal/base/ascii"
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
//
// The same reader answers three things Go's server would answer in plain
// text, late, or not at all, where the contract wants the envelope at once
// (sections 5 and 7): a request line that is not METHOD target HTTP/x.y
// (Go sees it only once the head ends, which for "GET /path\r\n" may be
// never), an HTTP version other than 1.0 and 1.1, and a head over 32 KiB
// (which must not be buffered whole). For these it checks the request line
// as soon as it ends and counts the held head; on a refusal it hands the
// server, in place of the head and everything after it, a small stand-in
// request carrying refusedMarker and the error code, and drops everything
// after it. The handler answers the stand-in with the envelope and the
// connection closes.

const (
	sniffBufSize = 16 << 10
	// maxSniffBuf bounds the sniffer's buffer: a held head is refused once
	// it passes maxHeaderBytes, so it always fits.
	maxSniffBuf = 2 * maxHeaderBytes
	// lingerTimeout is how long a connection whose head was refused keeps
	// reading (and dropping) what the client still sends after the answer,
	// so that closing with unread data does not reset the connection before
	// the client has read the answer. Go's server waits as long after its
	// own early refusals.
	lingerTimeout = 500 * time.Millisecond
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
	stRefused                       // a stand-in request replaced the rest: drop what follows
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
}

// WrapListener makes every accepted connection pass through the framing sniffer.
func WrapListener(ln net.Listener) net.Listener { return &framingListener{ln} }

type framingListener struct{ net.Listener }

func (l *framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newFramingConn(c, sniffBufSize), nil
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
				c.refuse(errHeadersTooLarge.code, nil)
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
					if k-c.ready > maxHeaderBytes {
						c.refuse(errHeadersTooLarge.code, nil)
						return
					}
					line := c.buf[c.ready:k]
					if code := checkRequestLine(line); code != "" {
						c.refuse(code, line)
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
				if c.headSeen > maxHeaderBytes {
					c.refuse(errHeadersTooLarge.code, c.requestLine())
				}
				return
			}
			if stop-c.ready > maxHeaderBytes {
				c.refuse(errHeadersTooLarge.code, c.requestLine())
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

// endHead inspects a complete request head, renames refused Transfer-Encoding
// headers in place, and sets the state for the body that follows. It reads
// header fields as Go's server does (net/textproto): one CR dropped before
// each LF, names matched in ASCII case only, values trimmed of spaces and
// tabs only, obs-fold lines joined with one space. Anything looser lets a
// field Go frames by, or answers 501 to, pass unrefused.
//
// It also refuses, with a stand-in request (see refuse), the heads Go's
// server answers itself in plain text before any handler runs, so that they
// get the envelope, a metric and, on a sensitive route, an audit line:
// header lines Go cannot parse, Host missing (HTTP/1.1), repeated or
// malformed, a Content-Length that is not one decimal number, and an Expect
// other than 100-continue (Go answers 417). Each rule is Go's own, read from
// net/textproto (readMIMEHeader), net/http (readRequest, fixLength, the
// Expect check in serve) and httpguts; where a rule is in doubt the head is
// passed, since refusing a head Go serves would be an outage. It reports
// false when it refused the head.
func (c *framingConn) endHead(head []byte) bool {
	// The lines are cut one by one, not split into a slice: this runs on
	// every request head, and a head's fields are read in one pass.
	rest := head
	var first []byte // the request line, as sent (with its CR)
	for first == nil {
		if len(rest) == 0 {
			return true // nothing but empty lines
		}
		var ln []byte
		ln, rest, _ = bytes.Cut(rest, []byte("\n"))
		if len(bytes.TrimSpace(ln)) != 0 { // empty lines before the request line
			first = ln
		}
	}
	reqLine := bytes.TrimSuffix(first, []byte("\r"))
	http10 := bytes.HasSuffix(reqLine, []byte("HTTP/1.0"))
	// Values are kept as slices of the head with their capacity cut to
	// their length, so that an obs-fold's append copies instead of writing
	// into the connection's buffer. Arrays on the stack hold the usual one.
	var teArr, clArr [1][]byte
	teLines, clValues := teArr[:0], clArr[:0]
	var teValue []byte
	// Host and Expect as Go's server sees them: Host's values counted, the
	// first one's bytes judged; the first Expect's value (Header.Get).
	hosts, hostBad := 0, false
	var hostValue []byte
	var expect []byte
	expectSeen := false
	// A space in a field name: textproto accepts it, the server then
	// refuses the name (after Content-Length is judged, so it ranks below).
	spacedName := false
	const otherField, teField, clField, hostField, expectField = 0, 1, 2, 3, 4
	last := otherField
	for i := 0; ; i++ {
		var ln []byte
		ln, rest, _ = bytes.Cut(rest, []byte("\n"))
		ln = bytes.TrimSuffix(ln, []byte("\r"))
		if len(ln) == 0 {
			break // the end of the head (or of the bytes)
		}
		if ln[0] == ' ' || ln[0] == '\t' { // obs-fold continues the previous field
			if i == 0 || !validFieldValue(ln) {
				// textproto refuses a first field line that starts
				// with a space ("malformed MIME header initial line").
				return c.refuseHead(refusedHeader, first)
			}
			switch last {
			case teField:
				teValue = append(append(teValue, ' '), trimOWS(ln)...)
			case clField:
				k := len(clValues) - 1
				clValues[k] = append(append(clValues[k], ' '), trimOWS(ln)...)
			case hostField:
				// The fold joins with a space, not a host byte, unless
				// all before it is empty (Go trims leading spaces).
				if len(hostValue) > 0 {
					hostBad = true
				} else {
					hostValue = trimOWS(ln)
					hostBad = !validHost(hostValue)
				}
			case expectField:
				// A copy (the full slice expression): the value may
				// still be a slice of the connection's buffer.
				expect = append(append(expect[:len(expect):len(expect)], ' '), trimOWS(ln)...)
			}
			continue
		}
		last = otherField
		colon := bytes.IndexByte(ln, ':')
		if colon < 0 {
			return c.refuseHead(refusedHeader, first)
		}
		name, value := ln[:colon], trimOWS(ln[colon+1:])
		switch fieldName(name) {
		case nameInvalid:
			return c.refuseHead(refusedHeader, first)
		case nameSpaced:
			spacedName = true
		}
		if !validFieldValue(value) {
			return c.refuseHead(refusedHeader, first)
		}
		switch {
		case ascii.EqualFold(name, "Transfer-Encoding"):
			teLines = append(teLines, name)
			teValue = value[:len(value):len(value)]
			last = teField
		case ascii.EqualFold(name, "Content-Length"):
			clValues = append(clValues, value[:len(value):len(value)])
			last = clField
		case ascii.EqualFold(name, "Host"):
			hosts++
			if hosts == 1 {
				hostValue, hostBad = value, !validHost(value)
				last = hostField
			}
		case ascii.EqualFold(name, "Expect"):
			if !expectSeen {
				expect, expectSeen = value, true
				last = expectField
			}
		}
	}
	if hosts > 1 { // net/http readRequest: "too many Host headers"
		return c.refuseHead(refusedHeader, first)
	}
	// fixLength: every Content-Length must read, once trimmed, exactly as
	// the first (5 and 05 differ), and the first must be a decimal number.
	cl, clSeen := int64(0), len(clValues) > 0
	for i, v := range clValues {
		if i > 0 && !bytes.Equal(trimOWS(v), trimOWS(clValues[0])) {
			return c.refuseHead(refusedContentLength, first)
		}
	}
	if clSeen {
		n, err := strconv.ParseUint(string(trimOWS(clValues[0])), 10, 63)
		if err != nil {
			return c.refuseHead(refusedContentLength, first)
		}
		cl = int64(n)
	}
	// The server's own checks, after readRequest: Host required on
	// HTTP/1.1 except for CONNECT, its value made of host bytes, every
	// name a token.
	if hosts == 0 && !http10 && !bytes.HasPrefix(reqLine, []byte("CONNECT ")) || hostBad || spacedName {
		return c.refuseHead(refusedHeader, first)
	}
	// serve: an Expect whose first value is set but names no 100-continue
	// token gets 417, on HTTP/1.0 too.
	if len(bytes.TrimLeft(expect, " \t")) > 0 && !hasToken(bytes.TrimLeft(expect, " \t"), "100-continue") {
		return c.refuseHead(refusedExpectation, first)
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
	return true
}

// refuseHead refuses the complete head that starts at c.ready, whose request
// line (already checked) is line, and reports false for endHead to return.
func (c *framingConn) refuseHead(kind string, line []byte) bool {
	c.refuse(kind, line)
	return false
}

const (
	nameValid   = iota
	nameSpaced  // token bytes and spaces: textproto takes it, the server refuses it
	nameInvalid // empty or another non-token byte: textproto refuses the line
)

// fieldName classifies a field name as net/textproto's
// canonicalMIMEHeaderKey and then httpguts.ValidHeaderFieldName judge it.
func fieldName(name []byte) int {
	if len(name) == 0 {
		return nameInvalid
	}
	kind := nameValid
	for _, b := range name {
		switch {
		case tokenByte[b]:
		case b == ' ':
			kind = nameSpaced
		default:
			return nameInvalid
		}
	}
	return kind
}

// validFieldValue: no control byte but HTAB, and no DEL (net/textproto's
// validHeaderValueByte; bytes from 0x80 up pass, as obs-text).
func validFieldValue(v []byte) bool {
	for _, b := range v {
		if b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// validHost is httpguts.ValidHostHeader: only the bytes a host, a port, an
// IPv6 literal or a zone can hold.
func validHost(h []byte) bool {
	for _, b := range h {
		if !hostByte[b] {
			return false
		}
	}
	return true
}

var hostByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!$%&()*+,-.:;=[']_~" {
		t[c] = true
	}
	return t
}()

// hasToken is net/http's hasToken: token occurs in v, ASCII case ignored,
// bounded on each side by the value's edge, a space, a tab or a comma.
func hasToken(v []byte, token string) bool {
	for sp := 0; sp+len(token) <= len(v); sp++ {
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !isTokenBoundary(v[end]) {
			continue
		}
		if ascii.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

// trimOWS trims what net/textproto trims around a field value.
func trimOWS(b []byte) []byte { return bytes.Trim(b, " \t") }

// requestLine returns the held head's request line once it has passed
// checkRequestLine, else nil.
func (c *framingConn) requestLine() []byte {
	if !c.lineChecked {
		return nil
	}
	n := bytes.IndexByte(c.buf[c.ready:c.end], '\n')
	return c.buf[c.ready : c.ready+n+1]
}

// checkRequestLine returns "" when line (ending in LF) has the shape Go's
// server parses, METHOD SP target SP HTTP/x.y, with version 1.0 or 1.1; the
// error code to refuse it with otherwise. It splits as net/http does (at the
// first two spaces, after dropping one CR before the LF), so that a line is
// refused here exactly when Go would fail it for its shape or answer 505.
func checkRequestLine(line []byte) string {
	line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
	_, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return errRequestLine.code
	}
	_, proto, ok := bytes.Cut(rest, []byte(" "))
	switch {
	case !ok:
		return errRequestLine.code
	case string(proto) == "HTTP/1.1" || string(proto) == "HTTP/1.0":
		return ""
	case len(proto) == len("HTTP/x.y") && bytes.HasPrefix(proto, []byte("HTTP/")) &&
		isDigit(proto[5]) && proto[6] == '.' && isDigit(proto[7]):
		return errVersion.code
	}
	return errRequestLine.code
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// refuse replaces the held head and everything after it with a stand-in
// request that the handler refuses with code; line is the head's request
// line when known. Bytes already released stay as they are.
func (c *framingConn) refuse(code string, line []byte) {
	stand := standIn(code, line)
	held := c.ready - c.r
	nb := make([]byte, held+len(stand))
	copy(nb, c.buf[c.r:c.ready])
	copy(nb[held:], stand)
	c.refusedAt = c.out + int64(held)
	c.buf, c.r, c.ready, c.end = nb, 0, len(nb), len(nb)
	c.state, c.err, c.lineBuf = stRefused, nil, nil
	c.linger.Store(true)
}

// standIn builds the request handed to the server for a refused head. It
// keeps the method and target when they are well formed, so that the access
// line, and the audit line of a sensitive route, name the route that was
// asked for; otherwise it asks for "GET *", which names none.
func standIn(code string, line []byte) []byte {
	method, target := []byte("GET"), []byte("*")
	if line != nil {
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		m, rest, _ := bytes.Cut(line, []byte(" "))
		t, _, _ := bytes.Cut(rest, []byte(" "))
		if validMethod(m) && validTarget(t) {
			method, target = m, t
		}
	}
	b := make([]byte, 0, len(method)+len(target)+96)
	b = append(append(append(append(b, method...), ' '), target...), " HTTP/1.1\r\nHost: gateway.invalid\r\nConnection: close\r\n"...)
	return append(append(append(b, refusedMarker+": "...), code...), "\r\n\r\n"...)
}

// validMethod: a token (RFC 9110), as Go's server requires.
func validMethod(m []byte) bool {
	if len(m) == 0 || len(m) > 32 {
		return false
	}
	for _, b := range m {
		if !tokenByte[b] {
			return false
		}
	}
	return true
}

// validTarget: an origin-form (or asterisk-form) target that Go's server
// parses, so that the stand-in request is never refused by the server
// before the handler runs.
func validTarget(t []byte) bool {
	if string(t) == "*" {
		return true
	}
	if len(t) == 0 || len(t) > 8<<10 || t[0] != '/' {
		return false
	}
	for _, b := range t {
		if b <= ' ' || b >= 0x7f {
			return false
		}
	}
	_, err := url.ParseRequestURI(string(t))
	return err == nil
}

var tokenByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

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
