package listener

import (
	"bytes"
	"net/http"
)

// Verdict is what the listener decided about a request's head. The sniffer
// records one per head it hands the server, in order, on the connection;
// the handler of each request takes its own (Conn.Verdict).
type Verdict uint8

// The verdicts. All but Passed and RefusedFraming come with a stand-in
// request in place of the refused head (StandIn).
const (
	// Passed: the listener refused nothing (or never saw the head: HTTP/2).
	Passed Verdict = iota
	// BadRequestLine: the request line is not METHOD target HTTP/x.y.
	BadRequestLine
	// UnsupportedVersion: an HTTP version other than 1.0 and 1.1.
	UnsupportedVersion
	// HeadTooLarge: the head is over MaxHeaderBytes.
	HeadTooLarge
	// BadHeader: a field line, or Host, that Go's server refuses.
	BadHeader
	// BadContentLength: Content-Length is not one decimal number,
	// repeated only identically.
	BadContentLength
	// BadExpect: an Expect other than 100-continue.
	BadExpect
	// RefusedFraming: a Transfer-Encoding the gateway refuses (with
	// Content-Length, or other than chunked). The request is the caller's,
	// framed by its Content-Length alone, or as bodiless.
	RefusedFraming
)

// StandIn reports whether v comes with a stand-in request: the head was
// refused outright, only its method and target (when well formed) are the
// caller's, and the connection ends after it.
func (v Verdict) StandIn() bool { return v != Passed && v != RefusedFraming }

// refusedMarker is a header of the stand-in request that replaces a head
// refused outright, so that the server reads a request there; its value
// names the verdict. framingMarker is the name the sniffer writes, byte for
// byte, over the name of a Transfer-Encoding header it refuses, so that the
// server does not apply it: exactly as long as "Transfer-Encoding", so no
// other byte of the stream moves. Neither carries the verdict to the
// handler. The names are the gateway's: a caller that sends either header
// itself only refuses its own request (the sniffer refuses its head; over
// HTTP/2, which no sniffer reads, markerVerdict does).
const (
	refusedMarker = "X-Faxgate-Refused"
	framingMarker = "X-Faxgate-Both-Te"
)

// The refusedMarker values, by verdict. (The first three are the error
// codes the gateway answers them with; the others name their kind.)
const (
	refusedRequestLine   = "invalid_request"
	refusedVersion       = "http_version_not_supported"
	refusedTooLarge      = "headers_too_large"
	refusedHeader        = "invalid_header"
	refusedContentLength = "invalid_content_length"
	refusedExpectation   = "expectation_failed"
)

var markerValue = [...]string{
	BadRequestLine:     refusedRequestLine,
	UnsupportedVersion: refusedVersion,
	HeadTooLarge:       refusedTooLarge,
	BadHeader:          refusedHeader,
	BadContentLength:   refusedContentLength,
	BadExpect:          refusedExpectation,
}

// Verdict returns the listener's verdict on the head of the request whose
// header is h: on a framing connection, the one the sniffer recorded for
// it. It takes that verdict, so a request's handler asks once. A request no
// sniffer read (the zero Conn) passes, unless it carries the listener's own
// header names (markerVerdict).
func (c Conn) Verdict(h http.Header) Verdict {
	if c.fc != nil {
		return c.fc.popVerdict()
	}
	return markerVerdict(h)
}

// markerVerdict is the verdict on a request that carries the listener's
// header names although the listener did not write them: the refusal
// refusedMarker's value names (a value of none of the listener's is a
// malformed request line), or the framing's. A caller that sends them only
// refuses its own request.
func markerVerdict(h http.Header) Verdict {
	if vs, ok := h[refusedMarker]; ok {
		var v string
		if len(vs) > 0 {
			v = vs[0]
		}
		return verdictNamed(v)
	}
	if _, ok := h[framingMarker]; ok {
		return RefusedFraming
	}
	return Passed
}

// verdictNamed is the stand-in verdict a refusedMarker value names;
// BadRequestLine for a value of none of the listener's.
func verdictNamed(v string) Verdict {
	switch v {
	case refusedTooLarge:
		return HeadTooLarge
	case refusedVersion:
		return UnsupportedVersion
	case refusedHeader:
		return BadHeader
	case refusedContentLength:
		return BadContentLength
	case refusedExpectation:
		return BadExpect
	default:
		return BadRequestLine
	}
}

// refuse replaces the held head and everything after it with a stand-in
// request carrying verdict v; line is the head's request line when known.
// Bytes already released stay as they are.
func (c *framingConn) refuse(v Verdict, line []byte) {
	c.pushVerdict(v)
	stand := standIn(v, line)
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
func standIn(v Verdict, line []byte) []byte {
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
	return append(append(append(b, refusedMarker+": "...), markerValue[v]...), "\r\n\r\n"...)
}
