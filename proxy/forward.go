package proxy

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// send forwards the request under upstream.timeout. The context it is
// sent with, which the timeout and the caller leaving cancel, carries the
// exchange for the transport. (Its own function: serve's many returns would
// make the runtime run this defer the slow way, about 0.3 µs a request.)
func (h *Handler) send(w *responseWriter, r *http.Request, ex *exchange) {
	ctx := h.deadlines.begin(&ex.up, r.Context(), ex)
	defer h.deadlines.end(&ex.up)
	ex.deadline = ctx
	h.forward(w, r, ex, ctx)
}

// forward relays ex's request to the upstream and the upstream's answer to
// w. It does what httputil.ReverseProxy did here: its hop-by-hop rules on
// both legs, no Go User-Agent, upstream 1xx answers relayed, trailers
// relayed, streamed answers flushed as they come, and a connection aborted
// (http.ErrAbortHandler) when an answer breaks off after its head. It
// leaves out what the gateway never used (Director, protocol upgrades,
// X-Forwarded-For, flush intervals) and ReverseProxy's per-request copies:
// the outgoing request is built once from what policy checked rather than
// cloned from the caller's and trimmed, and the upstream's header values
// move to the answer as they are rather than appended one by one. That is
// about 3 µs and 9 allocations a request less (docs/performance.md).
func (h *Handler) forward(w *responseWriter, r *http.Request, ex *exchange, ctx context.Context) {
	if r.ProtoAtLeast(1, 1) {
		// RFC 9110 section 15.2: no 1xx to an HTTP/1.0 client. Without the
		// hook, the transport reads past an upstream 1xx to the final answer.
		ex.trace.Got1xxResponse = ex.got1xx
	}
	out := r.WithContext(httptrace.WithClientTrace(ctx, &ex.trace))
	u := h.opts.Upstream
	// A fresh URL holds only what the gateway decided: the resolved path
	// under the upstream's base, and the query policy looked at.
	ex.outURL = url.URL{Scheme: u.Scheme, Host: u.Host, Path: h.basePath + ex.target.Path, RawQuery: ex.target.RawQuery}
	out.URL = &ex.outURL
	out.Host = "" // from the URL
	out.Close = false
	// Request trailers carry nothing the upstream API uses, and would be
	// headers no policy looked at.
	out.Trailer = nil
	out.Header = outgoingHeader(r.Header, ex.rules.IdentityHeader, ex.idHeader)
	switch {
	case r.ContentLength == 0:
		// No body: nil, so the transport may retry on a connection the
		// upstream closed first.
		out.Body = nil
	case ex.memBody != nil && r.Body == ex.memBody:
		// A body read whole, in a reader net/http knows to be in memory:
		// head and body go upstream in one write(2). A resend gets a fresh
		// reader from GetBody.
		out.Body = ex.memBody
	default:
		// The caller's body (or its resend copy) behind a Close that only
		// marks it closed: the transport closes the body it was given when
		// it fails, which must not close the caller's (a body awaiting
		// 100-continue would hang), and nothing may read the caller's body
		// once the handler is done.
		ex.guard.rc = r.Body
		out.Body = &ex.guard
		defer ex.guard.Close()
	}

	res, err := h.transport.RoundTrip(out)
	ex.traceMu.Lock()
	ex.roundTripDone = true
	ex.traceMu.Unlock()
	if err != nil {
		h.upstreamError(w, ex, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The gateway switches no protocol (docs/security.md).
		res.Body.Close()
		h.upstreamError(w, ex, errNotForwardable)
		return
	}
	removeHopByHopHeaders(res.Header)
	h.relayedResponse(ex, res)

	dst := w.Header()
	for k, vs := range res.Header {
		if old, ok := dst[k]; ok {
			dst[k] = append(old[:len(old):len(old)], vs...)
		} else {
			dst[k] = vs
		}
	}
	// The transport does not keep the Trailer header; announce what the
	// upstream declared, but no trailer whose name holds the token (the
	// transport's scrub saw values and names of headers, and the Trailer
	// header's names only as res.Trailer's keys).
	if ex.tok != nil {
		tok := ex.tok.Value.Reveal()
		for k := range res.Trailer {
			if containsFold(k, tok) {
				delete(res.Trailer, k)
			}
		}
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)

	if err := h.copyResponse(w, res); err != nil {
		defer res.Body.Close()
		if r.Context().Value(http.ServerContextKey) == nil {
			return // not under a server (a test calling ServeHTTP): nothing recovers a panic
		}
		// The answer broke off after its head: abort the connection, so
		// the caller cannot take what it got for a whole answer.
		panic(http.ErrAbortHandler)
	}
	res.Body.Close() // now, so that res.Trailer is filled in
	ex.trailers = len(res.Trailer) > 0
	if ex.trailers {
		// A trailer forces chunking: net/http must not compute a
		// Content-Length for a short body and drop the trailers.
		_ = http.NewResponseController(w).Flush()
	}
	if len(res.Trailer) == announced {
		copyHeader(dst, res.Trailer)
		return
	}
	for k, vs := range res.Trailer {
		k = http.TrailerPrefix + k
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// relayedResponse notes what the gateway learns from an upstream answer
// and prepares it for relaying.
func (h *Handler) relayedResponse(ex *exchange, res *http.Response) {
	// The gateway's X-Request-Id, set on the response writer, is the one the caller sees.
	delete(res.Header, "X-Request-Id")
	h.observeUpstream(ex, res)
	// An event stream goes out event by event (copyResponse), whatever its length.
	if res.ContentLength > 0 && res.ContentLength <= copyBufSize && res.Body != http.NoBody && !isEventStream(res.Header) {
		ex.whole.rc = res.Body // in the exchange: no allocation per response
		res.Body = &ex.whole
	}
}

// got1xx relays an upstream 1xx answer (103 Early Hints) until the final
// answer has come.
func (ex *exchange) got1xx(code int, header textproto.MIMEHeader) error {
	ex.traceMu.Lock()
	defer ex.traceMu.Unlock()
	if ex.roundTripDone {
		return nil
	}
	h := ex.w.Header()
	// The gateway's own headers (X-Request-Id, RateLimit-*) go out on the
	// 1xx and stay for the final answer; the 1xx's own do not.
	own := h.Clone()
	copyHeader(h, http.Header(header))
	ex.w.WriteHeader(code)
	clear(h) // WriteHeader does not clear the map after a 1xx
	maps.Copy(h, own)
	return nil
}

// copyResponse copies the answer's body to w through a pooled buffer. An
// answer of unknown length, or an event stream, is flushed after every
// write, its head at once; one of known length goes out as net/http
// buffers it. The error is a failed write, or a failed read other than
// the caller's cancellation (which is logged).
func (h *Handler) copyResponse(w *responseWriter, res *http.Response) error {
	var flush func() error
	if res.ContentLength == -1 || isEventStream(res.Header) {
		flush = http.NewResponseController(w).Flush
		_ = flush() // the head, even if the body is slow to come
	}
	buf := h.bufs.Get()
	defer h.bufs.Put(buf)
	for {
		n, rerr := res.Body.Read(buf)
		if rerr != nil && rerr != io.EOF && !errors.Is(rerr, context.Canceled) {
			h.errlog.Info("upstream body read failed", zap.String("route", w.ex.route), zap.Error(rerr))
		}
		if n > 0 {
			k, werr := w.Write(buf[:n])
			if werr != nil {
				return werr
			}
			if k != n {
				return io.ErrShortWrite
			}
			if flush != nil {
				_ = flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// isEventStream reports whether the answer is text/event-stream, as
// mime.ParseMediaType would read its Content-Type, without parsing it.
func isEventStream(h http.Header) bool {
	ct := h["Content-Type"]
	if len(ct) == 0 {
		return false
	}
	base, _, _ := strings.Cut(ct[0], ";")
	return strings.EqualFold(strings.TrimSpace(base), "text/event-stream")
}

// hopHeaders are the hop-by-hop headers of RFC 9110 section 7.6.1, and the
// older ones ReverseProxy also removed; a response loses them before it is
// relayed. (The request side drops them with strippedRequestHeaders.)
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHopHeaders removes the headers named in Connection, then the
// hop-by-hop set, as ReverseProxy did.
func removeHopByHopHeaders(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, f := range hopHeaders {
		delete(h, f)
	}
}

// outgoingHeader is the header sent upstream: the caller's, minus what
// the gateway never forwards (strippedRequestHeaders, the identity header,
// X-Forwarded-*, their underscore spellings) and minus every header the
// caller's Connection names; plus X-Request-Id, and an empty User-Agent
// when the caller sent none, so that Go's is not sent. Values are shared
// with the caller's header, which is not changed afterwards.
func outgoingHeader(in http.Header, identity string, requestID []string) http.Header {
	var named map[string]bool
	for _, f := range in["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				if named == nil {
					named = make(map[string]bool)
				}
				named[http.CanonicalHeaderKey(sf)] = true
			}
		}
	}
	out := make(http.Header, len(in)+1)
	for k, vs := range in {
		if strippedRequestName(k, identity) || named[k] {
			continue
		}
		out[k] = vs
	}
	out["X-Request-Id"] = requestID
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = noUserAgent
	}
	return out
}

// copyHeader appends src's values to dst's, as ReverseProxy did for 1xx
// heads and trailers.
func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
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

// traceState guards the 1xx relay against the final answer.
type traceState struct {
	trace         httptrace.ClientTrace
	traceMu       sync.Mutex
	roundTripDone bool
}

// noUserAgent is the User-Agent value that makes net/http send none. It is
// shared, and never written.
var noUserAgent = []string{""}
