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
