package proxy

import (
	"net/http"

	"github.com/faxgate/faxgate/policy/route"

	"github.com/faxgate/faxgate/proxy/listener"
)

// headRefusal returns the refusal a request earns by its head alone, or nil.
// The checks run in this order, which decides the answer to a head that
// fails several: a head the listener refused outright (a stand-in request,
// listener.Verdict.StandIn), an HTTP version the gateway does not speak, a
// method it does not forward (methodOK false), framing the listener
// refused, and a head over listener.MaxHeaderBytes as the handler sees it
// (an HTTP/2 head never passes the listener's count). After any of them but
// the method's, the head's framing or size is in doubt and the connection
// closes.
//
// It takes the listener's verdict on the head from c, r's connection
// (listener.Conn.Verdict), so it runs once per request: its result is the
// request's policy.Facts.Head.
func headRefusal(r *http.Request, c listener.Conn, methodOK bool) *route.Error {
	v := c.Verdict(r.Header)
	if v.StandIn() {
		return standInRefusal(v)
	}
	if !supportedVersion(r) {
		return errVersion
	}
	if !methodOK {
		return errMethod
	}
	if v == listener.RefusedFraming {
		return errFraming
	}
	if headerBytes(r) > listener.MaxHeaderBytes {
		return errHeadersTooLarge
	}
	return nil
}

// standInRefusal is the answer to a head the listener refused outright.
func standInRefusal(v listener.Verdict) *route.Error {
	switch v {
	case listener.HeadTooLarge:
		return errHeadersTooLarge
	case listener.UnsupportedVersion:
		return errVersion
	case listener.BadHeader:
		return errHeader
	case listener.BadContentLength:
		return errContentLength
	case listener.BadExpect:
		return errExpectation
	default:
		return errRequestLine
	}
}

// supportedVersion reports whether the gateway speaks r's protocol: HTTP/1.0
// and HTTP/1.1 (Go's server also admits HTTP/1.2 to 1.9), and HTTP/2 only
// over TLS (docs/security.md).
func supportedVersion(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.ProtoMinor <= 1 || r.ProtoMajor == 2 && r.TLS != nil
}
