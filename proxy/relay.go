package proxy

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/textproto"
	"strings"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/proxy/listener"
)

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

	// A whole answer is one Write: its head and body go out in one write
	// to the caller (listener.Conn.HoldWrites). When its last bytes are still
	// in net/http's buffer, behind a held flush, they are flushed now to
	// leave with it, rather than in a write of their own at the end. An
	// answer of at most smallAnswer bytes waits in net/http's own buffer
	// until the handler ends, so there is nothing to hold.
	var held listener.Held
	if res.Body == &l.whole && res.ContentLength > smallAnswer {
		held = ex.conn.HoldWrites()
		defer held.Release() // on a panic too: the connection's next answer must not be held
	}
	err := h.copyResponse(w, res)
	if err == nil && held.Holding() {
		err = http.NewResponseController(w).Flush()
	}
	if herr := held.Release(); err == nil {
		err = herr
	}
	if err != nil {
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

// smallAnswer is the size of net/http's buffer in front of the
// connection's for each answer: a Write of up to that many bytes stays in
// it until the handler returns or flushes.
const smallAnswer = 2 << 10

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
	bp := h.bufs.get()
	defer h.bufs.put(bp)
	buf := bp[:]
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
