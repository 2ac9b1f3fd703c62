package proxy

import "net/http"

// framingRejected reports a request whose framing the gateway refuses
// (contract section 5). The connection sniffer marks such requests; see
// conn.go.
func framingRejected(r *http.Request) bool {
	_, bad := r.Header[framingMarker]
	return bad
}

// framingMarker is the header name the connection sniffer substitutes, byte
// for byte, for a Transfer-Encoding header it refuses. It is exactly as long
// as "Transfer-Encoding", so no other byte of the stream moves.
const framingMarker = "X-Faxgate-Both-Te"

// refusedMarker is the header of the stand-in request the connection
// sniffer hands the server in place of a head it refuses outright (a
// malformed request line, an HTTP version other than 1.0 and 1.1, a head
// over 32 KiB, a head Go's server would refuse in plain text); its value is
// the contract error code, or one of the kinds below. See conn.go. A caller
// that sends it itself only refuses its own request.
const refusedMarker = "X-Faxgate-Refused"

// The refusedMarker values for heads Go's server would refuse itself before
// any handler (see endHead). Unlike the three above, they are not error
// codes: each names its own envelope error.
const (
	refusedHeader        = "invalid_header"         // errHeader
	refusedContentLength = "invalid_content_length" // errContentLength
	refusedExpectation   = "expectation_failed"     // errExpectation
)

// sniffedRefusal returns the refusal the sniffer marked the request with, if any.
func sniffedRefusal(r *http.Request) *gatewayError {
	vs, ok := r.Header[refusedMarker]
	if !ok {
		return nil
	}
	switch vs[0] {
	case errHeadersTooLarge.code:
		return errHeadersTooLarge
	case errVersion.code:
		return errVersion
	case refusedHeader:
		return errHeader
	case refusedContentLength:
		return errContentLength
	case refusedExpectation:
		return errExpectation
	default:
		return errRequestLine
	}
}

// supportedVersion reports whether the gateway speaks r's protocol: HTTP/1.0
// and HTTP/1.1 (Go's server also admits HTTP/1.2 to 1.9), and HTTP/2 only
// over TLS (contract section 7).
func supportedVersion(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.ProtoMinor <= 1 || r.ProtoMajor == 2 && r.TLS != nil
}
