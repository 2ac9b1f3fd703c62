package listener

import (
	"bytes"
	"net/url"
	"strconv"

	"github.com/faxgate/faxgate/internal/base/ascii"
)

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
	// callerMarker: the caller sent framingMarker itself.
	callerMarker := false
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
				return c.refuseHead(BadHeader, first)
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
			return c.refuseHead(BadHeader, first)
		}
		name, value := ln[:colon], trimOWS(ln[colon+1:])
		switch fieldName(name) {
		case nameInvalid:
			return c.refuseHead(BadHeader, first)
		case nameSpaced:
			spacedName = true
		}
		if !validFieldValue(value) {
			return c.refuseHead(BadHeader, first)
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
		case ascii.EqualFold(name, refusedMarker):
			// The caller's own: it refuses its request as it says.
			return c.refuseHead(verdictNamed(string(value)), first)
		case ascii.EqualFold(name, framingMarker):
			callerMarker = true
		}
	}
	if hosts > 1 { // net/http readRequest: "too many Host headers"
		return c.refuseHead(BadHeader, first)
	}
	// fixLength: every Content-Length must read, once trimmed, exactly as
	// the first (5 and 05 differ), and the first must be a decimal number.
	cl, clSeen := int64(0), len(clValues) > 0
	for i, v := range clValues {
		if i > 0 && !bytes.Equal(trimOWS(v), trimOWS(clValues[0])) {
			return c.refuseHead(BadContentLength, first)
		}
	}
	if clSeen {
		n, err := strconv.ParseUint(string(trimOWS(clValues[0])), 10, 63)
		if err != nil {
			return c.refuseHead(BadContentLength, first)
		}
		cl = int64(n)
	}
	// The server's own checks, after readRequest: Host required on
	// HTTP/1.1 except for CONNECT, its value made of host bytes, every
	// name a token.
	if hosts == 0 && !http10 && !bytes.HasPrefix(reqLine, []byte("CONNECT ")) || hostBad || spacedName {
		return c.refuseHead(BadHeader, first)
	}
	// serve: an Expect whose first value is set but names no 100-continue
	// token gets 417, on HTTP/1.0 too.
	if len(bytes.TrimLeft(expect, " \t")) > 0 && !hasToken(bytes.TrimLeft(expect, " \t"), "100-continue") {
		return c.refuseHead(BadExpect, first)
	}
	chunked := len(teLines) == 1 && ascii.EqualFold(bytes.TrimLeft(teValue, " \t"), "chunked")
	refuse := len(teLines) > 0 && (clSeen || !chunked)
	if refuse {
		for _, name := range teLines {
			copy(name, framingMarker) // same length: 17 bytes
		}
	}
	if refuse || callerMarker {
		c.pushVerdict(RefusedFraming)
	} else {
		c.pushVerdict(Passed)
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
func (c *framingConn) refuseHead(v Verdict, line []byte) bool {
	c.refuse(v, line)
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

// checkRequestLine returns Passed when line (ending in LF) has the shape
// Go's server parses, METHOD SP target SP HTTP/x.y, with version 1.0 or 1.1;
// the verdict to refuse it with otherwise. It splits as net/http does (at
// the first two spaces, after dropping one CR before the LF), so that a line
// is refused here exactly when Go would fail it for its shape or answer 505.
func checkRequestLine(line []byte) Verdict {
	line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
	_, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return BadRequestLine
	}
	_, proto, ok := bytes.Cut(rest, []byte(" "))
	switch {
	case !ok:
		return BadRequestLine
	case string(proto) == "HTTP/1.1" || string(proto) == "HTTP/1.0":
		return Passed
	case len(proto) == len("HTTP/x.y") && bytes.HasPrefix(proto, []byte("HTTP/")) &&
		isDigit(proto[5]) && proto[6] == '.' && isDigit(proto[7]):
		return UnsupportedVersion
	}
	return BadRequestLine
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

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
