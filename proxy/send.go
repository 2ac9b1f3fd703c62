package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
)

// send builds the outgoing request from what policy checked and sends it
// (transport.go: the token, and the resend after a 401). It does what
// httputil.ReverseProxy did here: its hop-by-hop rules, no Go User-Agent,
// upstream 1xx answers relayed. It leaves out what the gateway never used
// (Director, protocol upgrades, X-Forwarded-For) and ReverseProxy's
// per-request copies: the outgoing request is built once from what policy
// checked rather than cloned from the caller's and trimmed. That is about
// 3 µs and 9 allocations a request less (docs/performance.md).
func (h *Handler) send(r *http.Request, ex *exchange, ctx context.Context) (*http.Response, error) {
	l := &ex.leg
	if r.ProtoAtLeast(1, 1) {
		// RFC 9110 section 15.2: no 1xx to an HTTP/1.0 client. Without the
		// hook, the transport reads past an upstream 1xx to the final answer.
		l.trace.Got1xxResponse = ex.got1xx
	}
	l.trace.GotConn = l.gotConn
	if ex.span != nil && ex.span.IsRecording() {
		l.template = routeTemplate(ex) // the attempts' spans name it (transport.go)
	}
	out := r.WithContext(httptrace.WithClientTrace(ctx, &l.trace))
	u := h.opts.Upstream
	// A fresh URL holds only what the gateway decided: the resolved path
	// under the upstream's base, and the query policy looked at.
	l.outURL = url.URL{Scheme: u.Scheme, Host: u.Host, Path: h.basePath + ex.out.Target.Path, RawQuery: ex.out.Target.RawQuery}
	out.URL = &l.outURL
	out.Host = "" // from the URL
	out.Close = false
	// Request trailers carry nothing the upstream API uses, and would be
	// headers no policy looked at.
	out.Trailer = nil
	out.Header = outgoingHeader(r.Header, ex.rules.IdentityHeader, ex.idHeader[:])
	switch {
	case l.attempts > 0:
		// Sent again after a vendor 429 (throttled.go): a fresh reader over
		// the body the gateway holds, or none.
		out.Body, l.resend = l.resend, nil
	case r.ContentLength == 0:
		// No body: nil, so the transport may retry on a connection the
		// upstream closed first.
		out.Body = nil
	case l.memBody != nil && r.Body == l.memBody:
		// A body read whole, in a reader net/http knows to be in memory:
		// head and body go upstream in one write(2). A resend gets a fresh
		// reader from GetBody.
		out.Body = l.memBody
	default:
		// The caller's body (or its resend copy) behind a Close that only
		// marks it closed: the transport closes the body it was given when
		// it fails, which must not close the caller's (a body awaiting
		// 100-continue would hang), and nothing may read the caller's body
		// once the handler is done.
		l.guard.rc = r.Body
		out.Body = &l.guard
		defer l.closeGuards()
	}

	res, err := h.transport.roundTrip(out, ex)
	l.traceMu.Lock()
	l.roundTripDone = true
	l.traceMu.Unlock()
	if err != nil {
		return nil, err
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The gateway switches no protocol (docs/security.md).
		res.Body.Close()
		return nil, errNotForwardable
	}
	return res, nil
}

// guardedBody is the outgoing request's body: Close only marks it closed,
// and a Read after that fails rather than reading the caller's body.
type guardedBody struct {
	rc     io.ReadCloser
	closed atomic.Bool
}

var errBodyClosed = errors.New("proxy: read of a request body after the exchange ended")

func (b *guardedBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errBodyClosed
	}
	return b.rc.Read(p)
}

func (b *guardedBody) Close() error {
	b.closed.Store(true)
	return nil
}

// closeGuards ends every read of the caller's body through the outgoing
// request: the first attempt's and an unsent body's second (again).
func (l *leg) closeGuards() {
	l.guard.Close()
	if l.retryGuard != nil {
		l.retryGuard.Close()
	}
}

// traceState guards the 1xx relay against the final answer, and notes
// whether a connection to the upstream (or its proxy) was had: a request
// that never had one certainly did not reach the upstream (failure.go).
type traceState struct {
	trace         httptrace.ClientTrace
	traceMu       sync.Mutex
	roundTripDone bool
	connected     atomic.Bool
}

// gotConn is the trace's GotConn: a connection was obtained for an attempt.
func (l *leg) gotConn(httptrace.GotConnInfo) { l.connected.Store(true) }
