package proxy

import "net/http"

// maxHeaderBytes is the request head size answered with 431 (contract section 5).
const maxHeaderBytes = 32 << 10

// headRefusal returns the refusal a request earns by its head alone, or nil.
// The checks run in this order, which decides the answer to a head that
// fails several: a head the listener refused (a stand-in request, see
// sniffedRefusal), an HTTP version the gateway does not speak, a method it
// does not forward (methodOK false), framing the listener marked as refused,
// and a head over maxHeaderBytes as the handler sees it (HTTP/2 heads never
// pass the listener's count). After any of them but the method's, the head's
// framing or size is in doubt and the connection closes.
//
// readAuditBody passes methodOK true: for it only the other checks count,
// since a refused method leaves the body's framing sound.
func headRefusal(r *http.Request, methodOK bool) *gatewayError {
	if ge := sniffedRefusal(r); ge != nil {
		return ge
	}
	if !supportedVersion(r) {
		return errVersion
	}
	if !methodOK {
		return errMethod
	}
	if framingRejected(r) {
		return errFraming
	}
	if headerBytes(r) > maxHeaderBytes {
		return errHeadersTooLarge
	}
	return nil
}
