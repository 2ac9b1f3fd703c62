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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/policy/route"
)

// forward is the forward leg: it sends the request upstream under
// upstream.timeout, tells upstream admission what the answer says about the
// budget, and relays the answer. Its one way out is the result: nil when an
// answer was relayed, or the refusal that how it failed earns
// (failure.go). An answer that breaks off after its head aborts the
// caller's connection instead (http.ErrAbortHandler), so that the caller
// cannot take what it got for a whole answer.
func (h *Handler) forward(w *responseWriter, r *http.Request, ex *exchange) *route.Error {
	l := &ex.leg
	ctx := h.deadlines.begin(&l.up, r.Context())
	defer h.deadlines.end(&l.up)
	if spent := time.Since(ex.start) - ex.out.Admission.Waited; spent > slowStart {
		// upstream.timeout bounds the whole exchange, the time the caller
		// took to send a body read before it (the wait for the budget
		// aside): a caller sees at most max_wait + upstream.timeout
		// (docs/upstream-budget.md). Rare, so a timer of its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(h.opts.UpstreamTimeout-spent))
		defer cancel()
	}
	l.deadline = ctx
	res, err := h.send(r, ex, ctx)
	if err != nil {
		return h.failed(ex, err)
	}
	h.observe(ex, res)
	h.relay(w, r, ex, res)
	return nil
}

// slowStart is how long the decisions and a body read whole may take before
// the forward counts that time against upstream.timeout. Below it the
// deadlines list's timeout from the forward's start holds, which costs no
// timer per request.
const slowStart = 50 * time.Millisecond

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
		defer l.guard.Close()
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

// observe tells upstream admission what an answer says about the budget
// (a 429 holds the route), and exports X-RateLimit-Remaining.
func (h *Handler) observe(ex *exchange, res *http.Response) {
	// The canonical key, looked up directly: Get would canonicalize
	// "X-RateLimit-Remaining" into a new string on every response.
	if vs := res.Header["X-Ratelimit-Remaining"]; len(vs) > 0 && vs[0] != "" {
		if n, err := strconv.ParseInt(vs[0], 10, 64); err == nil && n >= 0 {
			ex.pm.rateLimitRemaining().Set(float64(n))
		}
	}
	if res.StatusCode == http.StatusTooManyRequests && h.opts.Admission != nil {
		h.opts.Admission.Observe(ex.out.Route, &ex.rules.Upstream, res.StatusCode, res.Header.Get("Retry-After"))
	}
}

// relay writes the upstream's answer to the caller: its head (scrubbed of
// the token, hop-by-hop headers removed), its body through a pooled buffer,
// flushed as it comes when streamed, and its trailers.
func (h *Handler) relay(w *responseWriter, r *http.Request, ex *exchange, res *http.Response) {
	l := &ex.leg
	removeHopByHopHeaders(res.Header)
	// The gateway's X-Request-Id, set on the response writer, is the one the caller sees.
	delete(res.Header, "X-Request-Id")
	// An event stream goes out event by event (copyResponse), whatever its length.
	if res.ContentLength > 0 && res.ContentLength <= copyBufSize && res.Body != http.NoBody && !isEventStream(res.Header) {
		l.whole.rc = res.Body // in the exchange: no allocation per response
		res.Body = &l.whole
	}
	dst := w.Header()
	tok := l.token()
	relayHeader(dst, res.Header, tok)
	// The transport does not keep the Trailer header; announce what the
	// upstream declared, but no trailer whose name holds the token.
	for k := range res.Trailer {
		if containsFold(k, tok) {
			delete(res.Trailer, k)
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
	l.trailers = len(res.Trailer) > 0
	if l.trailers {
		// A trailer forces chunking: net/http must not compute a
		// Content-Length for a short body and drop the trailers.
		_ = http.NewResponseController(w).Flush()
	}
	if len(res.Trailer) == announced {
		relayHeader(dst, res.Trailer, tok)
		return
	}
	trailers := make(http.Header, len(res.Trailer))
	for k, vs := range res.Trailer {
		trailers[http.TrailerPrefix+k] = vs
	}
	relayHeader(dst, trailers, tok)
}

// got1xx relays an upstream 1xx answer (103 Early Hints) until the final
// answer has come.
func (ex *exchange) got1xx(code int, header textproto.MIMEHeader) error {
	ex.leg.traceMu.Lock()
	defer ex.leg.traceMu.Unlock()
	if ex.leg.roundTripDone {
		return nil
	}
	h := ex.w.Header()
	// The gateway's own headers (X-Request-Id, RateLimit-*) go out on the
	// 1xx and stay for the final answer; the 1xx's own do not.
	own := h.Clone()
	relayHeader(h, http.Header(header), ex.leg.token())
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
			h.errlog.Info("upstream body read failed", zap.String("route", w.ex.out.Route), zap.Error(rerr))
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

// relayHeader is the one way an upstream header reaches the caller, for
// the answer's head, a 1xx's and the trailers: src's fields are added to
// dst's (ReverseProxy's copyHeader), except every field whose name or value
// holds tok, the token sent upstream, so an upstream that echoes
// credentials cannot hand them to a caller. The values move as they are
// (a field dst lacks takes src's slice: no copy per value).
func relayHeader(dst, src http.Header, tok string) {
	for k, vs := range src {
		if tok != "" && (containsFold(k, tok) || anyContains(vs, tok)) {
			continue
		}
		if old, ok := dst[k]; ok {
			dst[k] = append(old[:len(old):len(old)], vs...)
		} else {
			dst[k] = vs
		}
	}
}

func anyContains(vs []string, s string) bool {
	for _, v := range vs {
		if strings.Contains(v, s) {
			return true
		}
	}
	return false
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

// noUserAgent is the User-Agent value that makes net/http send none. It is
// shared, and never written.
var noUserAgent = []string{""}
