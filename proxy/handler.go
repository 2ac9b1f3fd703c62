// Package proxy is faxgate's request path: it names the caller, resolves the
// request-target to exactly one route, applies policy and rate limits,
// strips caller credentials, injects the Bearer token and relays the exchange
// with the upstream (forward.go).
package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/metrics"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/tokencache"
)

// smallBodyMax is the largest body of known length read before it is
// forwarded (prepareBody); larger ones stream.
const smallBodyMax = 32 << 10

// maxHeaderBytes is the request head size answered with 431 (contract section 5).
const maxHeaderBytes = 32 << 10

// Options configures a Handler. Every dependency is injected.
type Options struct {
	Upstream     *url.URL          // upstream.base_url, possibly with a path prefix
	Transport    http.RoundTripper // the tuned transport to the upstream
	Tokens       tokencache.Source
	Rules        *policy.Rules
	MaxBodyBytes int64
	// ResendBufferBytes caps the memory all requests together hold in
	// copies of their bodies for a resend after a 401
	// (server.resend_buffer_bytes); 0 keeps none.
	ResendBufferBytes int64
	ReadTimeout       time.Duration // longest pause between two reads of a request body
	UpstreamTimeout   time.Duration
	Metrics           *metrics.Metrics
	Logger            *zap.Logger
	// Holds is the table of routes held after an upstream 429 (contract
	// section 13); nil holds nothing.
	Holds *policy.Holds
	// AccessLog, when set, writes the access lines in place of Logger
	// (the same bytes, cheaper); nil writes them through Logger.
	AccessLog *AccessLog
	// AuditLogger writes the audit lines (contract section 9), used as is.
	// It must be enabled at info level whatever log.level says, so that no
	// audit line is lost to the level; nil means Logger.Named("audit"),
	// which is subject to Logger's level.
	AuditLogger *zap.Logger
}

// Handler is the proxy listener's http.Handler.
type Handler struct {
	opts      Options
	rules     atomic.Pointer[policy.Rules]
	children  atomic.Pointer[metricCache] // of the rules in force
	transport *authTransport
	bufs      *bufferPool // response copy buffers
	ids       *idGen
	replay    *replayPool
	// deadlines enforces upstream.timeout on every exchange in flight.
	deadlines *deadlines
	log       *zap.Logger
	errlog    *zap.Logger // a failed read of an upstream answer
	audit     *zap.Logger
	basePath  string
}

// New builds the handler.
func New(o Options) *Handler {
	h := &Handler{
		opts:      o,
		ids:       newIDGen(),
		replay:    newReplayPool(o.ResendBufferBytes),
		deadlines: newDeadlines(o.UpstreamTimeout),
		log:       o.Logger.Named("access"),
		errlog:    o.Logger.Named("reverseproxy"),
		transport: &authTransport{next: o.Transport, tokens: o.Tokens, metrics: o.Metrics},
		bufs:      newBufferPool(),
		audit:     o.AuditLogger,
		basePath:  strings.TrimSuffix(o.Upstream.Path, "/"),
	}
	if h.audit == nil {
		h.audit = o.Logger.Named("audit")
	}
	h.SetRules(o.Rules)
	return h
}

// Rules returns the rules in force.
func (h *Handler) Rules() *policy.Rules { return h.rules.Load() }

// SetRules replaces the rules for every request that starts afterwards.
func (h *Handler) SetRules(r *policy.Rules) {
	h.children.Store(newMetricCache(h.opts.Metrics))
	h.rules.Store(r)
}

// exchange is one request's state, shared by the handler, the rewrite hook,
// the transport and the error handler through the request context.
type exchange struct {
	w              responseWriter // embedded: one allocation per request, not two
	start          time.Time
	id             string
	idHeader       []string
	caller         string
	route          string
	method         string
	target         policy.Target
	code           string // contract error code when the gateway answered
	upstreamStatus int
	body           requestBody
	buffered       []byte            // the whole body, when it was read first (small, or checked by a sensitive route)
	reserved       int64             // body memory counted under server.resend_buffer_bytes, released in finish
	memReader      bytes.Reader      // reads buffered for the first attempt
	memBody        io.ReadCloser     // memReader as the request body; nil when nothing was buffered
	replay         *replayBody       // the streamed body's copy for a resend, when kept
	fail           *gatewayError     // set by the transport or body reader
	tok            *tokencache.Token // the token sent upstream, once the transport ran
	pm             *pairMetrics      // the metric children of (caller, route), once both are settled
	status         int               // the status answered, for the access line
	elapsed        time.Duration     // the time taken, for the access line
	logField       [1]zap.Field      // the access line's one (inlined) field
	whole          wholeBody         // the upstream response body, when it is read whole
	deadline       context.Context
	up             upstreamCtx   // deadline's base: see deadlines
	outURL         url.URL       // the outgoing request's URL
	guard          guardedBody   // the outgoing request's body, most often
	traceState                   // the 1xx relay's
	trailers       bool          // the upstream's trailers were copied to the answer's header map
	rules          *policy.Rules // the rules this request was decided by, whatever reloads happen meanwhile
	decision       policy.Decision
	// auditRoute is the sensitive route the path resolves to, whatever the
	// method and whoever the caller: "" when no audit line is due.
	auditRoute string
	// auditIDs: the audit line carries number_id and order_id.
	auditIDs bool
	numberID string
	orderID  string
}

type exchangeKey struct{}

func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	m := h.opts.Metrics
	m.Inflight.Inc()
	defer m.Inflight.Dec()
	ex := &exchange{start: time.Now(), caller: "unidentified", route: "none", method: metrics.Method(r.Method)}
	w := &ex.w
	w.ResponseWriter, w.ex = rw, ex
	if id := r.Header.Get("X-Request-Id"); validRequestID(id) && !h.holdsToken(id) {
		ex.id = id
	} else {
		ex.id = h.ids.next()
	}
	// One read-only slice serves the response and the upstream request.
	ex.idHeader = []string{ex.id}
	w.Header()["X-Request-Id"] = ex.idHeader
	defer h.finish(w, r, ex)

	if ge := h.serve(w, r, ex); ge != nil {
		h.readAuditBody(w, r, ex)
		h.refuse(w, ex, ge)
	}
}

// serve runs the request through every check and forwards it; a non-nil
// result is the refusal to answer with.
func (h *Handler) serve(w *responseWriter, r *http.Request, ex *exchange) *gatewayError {
	rules := h.rules.Load()
	ex.rules = rules
	// Who is calling and which route the path names are settled before any
	// refusal, so that every refusal of a request to a sensitive route is
	// audited with its caller and route (contract section 9). The refusals
	// below keep their order.
	name, _, identified := rules.Identifier.Identify(r)
	if identified {
		ex.caller = name
	}
	tgt, perr := rules.Resolve(r.Method, r.RequestURI)
	if perr == nil {
		ex.target, ex.route = tgt, tgt.Route
		if base := rules.Policy.Base(tgt.Route); base.Sensitive {
			ex.auditRoute = tgt.Route
			ex.auditIDs = tgt.Route == "numbers.delete" || base.Confirm
		}
	}
	if ge := sniffedRefusal(r); ge != nil {
		w.Header().Set("Connection", "close")
		return ge
	}
	if !supportedVersion(r) {
		w.Header().Set("Connection", "close")
		return errVersion
	}
	if ex.method == "other" {
		return errMethod
	}
	if framingRejected(r) {
		w.Header().Set("Connection", "close")
		return errFraming
	}
	if headerBytes(r) > maxHeaderBytes {
		w.Header().Set("Connection", "close")
		return errHeadersTooLarge
	}
	if !identified {
		return errUnidentified
	}
	if perr != nil {
		return &gatewayError{perr.Status, perr.Code, perr.Message}
	}
	if tgt.Route == "auth" {
		return h.auth(w, r, ex)
	}
	ex.decision = rules.Policy.Decide(name, tgt.Route)
	if !ex.decision.Allowed {
		return forbidden(name, tgt.Route)
	}
	if !tgt.MethodOK {
		return routeMethod(tgt.Route)
	}
	// No protocol switch passes the gateway (contract section 5): Upgrade is
	// removed, so the forward never attempts one and the request is served
	// as the plain HTTP it also is (curl --http2 offers h2c on every request).
	delete(r.Header, "Upgrade")
	if rules.Limiter != nil {
		res := rules.Limiter.Allow(r.Context(), name)
		setRateLimitHeaders(w.Header(), res)
		if !res.Allowed {
			m := h.opts.Metrics
			m.RateLimited.WithLabelValues(name).Inc()
			return rateLimited(name)
		}
	}
	if r.ContentLength > h.opts.MaxBodyBytes {
		w.Header().Set("Connection", "close")
		return errBodyTooLarge
	}
	if ex.decision.Confirm {
		// Before the body is read: a request whose body the upstream would
		// not read as the checked JSON is refused without reading it.
		if perr := policy.CheckConfirmHeaders(r.Header); perr != nil {
			return &gatewayError{perr.Status, perr.Code, perr.Message}
		}
	}
	if ge := h.prepareBody(w, r, ex); ge != nil {
		return ge
	}
	if ex.decision.Confirm {
		if ge := h.confirm(r, ex); ge != nil {
			return ge
		}
	}
	if ge := h.admitUpstream(w, r, ex); ge != nil {
		return ge
	}
	ex.pm = h.children.Load().pair(ex.caller, ex.route)
	h.send(w, r, ex)
	if ex.trailers && ex.tok != nil {
		// Trailers are still to be sent from this map: an upstream's echo of
		// the token goes like its header echo does. (The headers were
		// scrubbed as they came, in the transport.)
		scrubResponseHeaders(w.Header(), ex.tok.Value.Reveal())
	}
	return nil
}

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

// holdsToken reports whether s, a value the caller chose that the gateway
// logs (request ID, number_id, order_id), contains the current token: a
// caller that knows the token must not get it written into the logs.
func (h *Handler) holdsToken(s string) bool {
	tok := h.opts.Tokens.Current()
	return tok != nil && tok.Value.Reveal() != "" && strings.Contains(s, tok.Value.Reveal())
}

// auth answers POST /v1/auth for a caller: it is never forwarded.
func (h *Handler) auth(w *responseWriter, r *http.Request, ex *exchange) *gatewayError {
	if !ex.rules.AuthShim {
		return errAuthManaged
	}
	if r.Method != http.MethodPost {
		return routeMethod("auth")
	}
	// The shim lets unmodified SDKs that insist on the auth dance work: they get
	// a placeholder, which the gateway strips like any caller credential.
	body := `{"status":1,"message":"Token generated successfully.","data":{"access_token":"faxgate-managed","token_type":"Bearer","expires_in":86400}}`
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(body))
	return nil
}

// confirm enforces policy.confirm on the buffered body (contract section 2).
func (h *Handler) confirm(r *http.Request, ex *exchange) *gatewayError {
	var body []byte
	if ex.buffered != nil {
		body = ex.buffered
	} else if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		// Over the replay buffer: far larger than any delete body.
		return &gatewayError{http.StatusRequestEntityTooLarge, "body_too_large", "a confirmed route's body must be at most 1 MiB"}
	}
	confirm := ""
	if vs := r.Header.Values(policy.ConfirmHeader); len(vs) == 1 {
		confirm = vs[0]
	}
	num, order, perr := policy.CheckConfirm(ex.target.RawQuery, body, confirm)
	ex.numberID, ex.orderID = num, order
	if perr != nil {
		return &gatewayError{perr.Status, perr.Code, perr.Message}
	}
	return nil
}

// prepareBody wraps the caller's body. A body streams upstream as it arrives,
// with a copy kept for a resend after a 401 (replay.go) when it is at most
// retryBufferMax and the resend memory allows. A body of at most
// smallBodyMax with a known length, and the body of a route whose checks
// read it (policy.confirm, or the number and order IDs of the audit line),
// is read whole first.
func (h *Handler) prepareBody(w *responseWriter, r *http.Request, ex *exchange) *gatewayError {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	ex.body = requestBody{rc: r.Body, limit: h.opts.MaxBodyBytes}
	if !bodyInMemory(r) {
		// The body may still be on its way: every read pushes the read
		// deadline forward (a body already read whole needs none).
		ex.body.ctl, ex.body.timeout = http.NewResponseController(w.ResponseWriter), h.opts.ReadTimeout
	}
	if r.ContentLength > retryBufferMax {
		r.Body = &ex.body
		return nil
	}
	// A small body of known length is read first, into a fresh buffer the
	// size of the body: it costs little, and a body net/http knows to be in
	// memory goes upstream in the same write(2) as the headers.
	small := r.ContentLength > 0 && r.ContentLength <= smallBodyMax
	if !ex.decision.Confirm && !ex.auditIDs && !small {
		ex.replay = newReplayBody(&ex.body, h.replay, retryBufferMax)
		r.Body, r.GetBody = ex.replay, ex.replay.getBody
		return nil
	}
	// Buffering has an overall deadline too, so a body trickled in just under
	// the read timeout cannot hold a goroutine and a buffer indefinitely.
	ex.body.hardDeadline = ex.start.Add(h.opts.UpstreamTimeout)
	// A fresh buffer per request, counted under server.resend_buffer_bytes
	// with every other body copy: the transport may read it after the
	// handler returns (a resend's body), so it is never handed to another.
	data, complete, err := h.replay.readAll(&ex.body, retryBufferMax, r.ContentLength, ex.decision.Confirm, &ex.reserved)
	ex.body.hardDeadline = time.Time{}
	if err != nil {
		if ex.body.err != nil {
			w.Header().Set("Connection", "close")
			return ex.body.err
		}
		return errBodyRead
	}
	if !complete {
		// The body memory is spoken for: this body streams without a copy
		// (no resend after a 401, no IDs on the audit line), after what was
		// read.
		if len(data) == 0 {
			r.Body = &ex.body
		} else {
			r.Body = multiReadCloser{Reader: io.MultiReader(bytes.NewReader(data), &ex.body), c: &ex.body}
		}
		return nil
	}
	if len(data) > retryBufferMax {
		// Unknown length and over the buffer: stream what was read, then the rest.
		r.Body = multiReadCloser{Reader: io.MultiReader(bytes.NewReader(data), &ex.body), c: &ex.body}
		return nil
	}
	ex.buffered = data
	r.ContentLength = int64(len(data))
	r.TransferEncoding = nil
	if len(data) == 0 {
		r.Body = http.NoBody
		return nil
	}
	// The transport sends this body on the first attempt (see RoundTrip);
	// a resend gets a fresh reader from GetBody.
	ex.memReader.Reset(data)
	ex.memBody = io.NopCloser(&ex.memReader)
	r.Body = ex.memBody
	r.GetBody = ex.getBody
	return nil
}

// getBody is the buffered body's http.Request.GetBody.
func (ex *exchange) getBody() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(ex.buffered)), nil
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

// upstreamError answers a request the upstream did not answer in full.
func (h *Handler) upstreamError(w *responseWriter, ex *exchange, err error) {
	var ge *gatewayError
	switch {
	case ex.body.err != nil:
		ge = ex.body.err
		w.Header().Set("Connection", "close")
	case ex.fail != nil:
		ge = ex.fail
	case err == errNotForwardable:
		ge = errUpstreamUnavailable
	case ex.deadline != nil && context.Cause(ex.deadline) == context.DeadlineExceeded:
		ge = errUpstreamTimeout
		if ex.body.rc != nil && !ex.body.eof.Load() && ex.upstreamStatus == 0 {
			// The body was still arriving when time ran out: the upstream
			// could not have answered it; the caller was too slow.
			ge = errBodyTimeout
			w.Header().Set("Connection", "close")
		}
	case ex.up.caller != nil && ex.up.caller.Err() != nil:
		// The caller went away; nobody reads an answer. 499 is the log's word for it.
		ex.code = "client_closed"
		w.status = 499
		return
	default:
		ge = errUpstreamUnavailable
	}
	h.refuse(w, ex, ge)
}

// refuse answers with the gateway's envelope and counts the denial.
func (h *Handler) refuse(w *responseWriter, ex *exchange, ge *gatewayError) {
	ex.code = ge.code
	h.opts.Metrics.Denied.WithLabelValues(ex.caller, ex.route, ge.code).Inc()
	if w.wroteHeader {
		return
	}
	writeError(w, ge)
}

// finish writes the access line, the audit line and the request metrics.
func (h *Handler) finish(w *responseWriter, r *http.Request, ex *exchange) {
	if ex.replay != nil {
		// The forward has returned (or never ran): no first attempt reads
		// the body any more, and no resend can start.
		ex.replay.attemptDone()
		ex.replay.done()
	}
	if ex.reserved != 0 {
		// Counted until now: the handler is done with the body's copy (a
		// resend still reading it holds it only a moment longer).
		h.replay.release(ex.reserved)
	}
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	now := time.Now()
	elapsed := now.Sub(ex.start)
	pm := ex.pm
	if pm == nil { // refused before the pair was looked up
		pm = h.children.Load().pair(ex.caller, ex.route)
	}
	pm.request(ex.method, status).Inc()
	pm.duration.Observe(elapsed.Seconds())
	if al := h.opts.AccessLog; al != nil {
		ex.status, ex.elapsed = status, elapsed
		al.write(now, ex)
	} else if ce := h.log.Check(zap.InfoLevel, "request"); ce != nil {
		ex.status, ex.elapsed = status, elapsed
		// The field lives in the exchange: a variadic argument would be
		// allocated on every request.
		ex.logField[0] = zap.Inline(accessLine{ex})
		ce.Write(ex.logField[:]...)
	}
	if ex.auditRoute != "" {
		h.writeAudit(ex, status)
	}
}

// accessLine is the access log line's fields (contract section 9), added
// by one inlined marshaler: ten zap.Fields would be built, type-switched
// and, as a variadic slice, allocated on every request.
type accessLine struct{ ex *exchange }

func (l accessLine) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	ex := l.ex
	enc.AddString("request_id", ex.id)
	enc.AddString("caller", ex.caller)
	enc.AddString("route", ex.route)
	enc.AddString("method", ex.method)
	enc.AddInt("status", ex.status)
	enc.AddFloat64("duration_ms", float64(ex.elapsed.Microseconds())/1000)
	enc.AddInt64("bytes_in", ex.body.n)
	enc.AddInt64("bytes_out", ex.w.bytes)
	enc.AddInt("upstream_status", ex.upstreamStatus)
	enc.AddString("error", ex.code)
	return nil
}

// writeAudit writes the one audit line of a request to a sensitive route
// (contract section 9). decision says what the upstream may have done:
// "denied", it never saw the request; "forwarded", it answered
// (upstream_status); "unknown", the request went to it but no answer came
// back (a timeout, a reset, the caller leaving), so the action may have
// happened. An auditor must never read "denied" for a delete that may have
// been carried out.
func (h *Handler) writeAudit(ex *exchange, status int) {
	decision, reason := "denied", ex.code
	switch {
	case ex.upstreamStatus != 0:
		decision, reason = "forwarded", ""
	case ex.tok != nil:
		// The transport records the token just before the upstream call, so
		// the request was on its way.
		decision = "unknown"
	}
	fields := []zap.Field{
		zap.String("request_id", ex.id),
		zap.String("caller", ex.caller),
		zap.String("route", ex.auditRoute),
		zap.String("decision", decision),
		zap.String("reason", reason),
		zap.Int("status", status),
		zap.Int("upstream_status", ex.upstreamStatus),
	}
	if ex.auditIDs {
		num, order := ex.numberID, ex.orderID
		if num == "" && order == "" && ex.buffered != nil {
			num, order = policy.AuditIDs(ex.buffered)
		}
		if h.holdsToken(num + order) {
			// A token split across the two values is still a token in the log.
			num, order = "[redacted]", "[redacted]"
		}
		fields = append(fields, zap.String("number_id", h.auditValue(num)), zap.String("order_id", h.auditValue(order)))
	}
	h.audit.Info("audit", fields...)
}

// maxAuditValue bounds a caller-chosen value in the audit line: a real ID is
// short, and a megabyte-long one must not become a megabyte-long log line.
const maxAuditValue = 256

// auditValue is v as the audit line may hold it: never a value containing
// the current token (checked on the whole value, before shortening), and
// never longer than maxAuditValue bytes.
func (h *Handler) auditValue(v string) string {
	if h.holdsToken(v) {
		return "[redacted]"
	}
	if len(v) > maxAuditValue {
		return v[:maxAuditValue] + "[truncated]"
	}
	return v
}

// readAuditBody reads, for the audit line, the body of a refused request
// whose audit line carries number_id and order_id (contract section 9: also
// when the request is denied). It is bounded like the replay buffer: 1 MiB,
// server.max_body_bytes, the read timeout between reads and the overall
// deadline. It reads nothing when the head itself was refused (its framing
// or size is in doubt and the connection closes), when the body is known to
// be too large, when the body was already read, or when the caller waits for
// 100 Continue: asking for a body only to refuse it would contradict that.
func (h *Handler) readAuditBody(w *responseWriter, r *http.Request, ex *exchange) {
	if !ex.auditIDs || ex.body.rc != nil || ex.buffered != nil ||
		r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.ContentLength > retryBufferMax ||
		r.ContentLength > h.opts.MaxBodyBytes {
		return
	}
	if sniffedRefusal(r) != nil || !supportedVersion(r) || framingRejected(r) || headerBytes(r) > maxHeaderBytes {
		return
	}
	if ascii.EqualFold(strings.TrimSpace(r.Header.Get("Expect")), "100-continue") {
		return
	}
	ex.body = requestBody{rc: r.Body, ctl: http.NewResponseController(w.ResponseWriter),
		timeout: h.opts.ReadTimeout, limit: min(h.opts.MaxBodyBytes, retryBufferMax),
		hardDeadline: ex.start.Add(h.opts.UpstreamTimeout)}
	// Counted with every other body copy, never forced: when the memory is
	// spoken for, a refused caller's audit line goes without its IDs
	// rather than holding memory for it.
	body, complete, err := h.replay.readAll(&ex.body, retryBufferMax, r.ContentLength, false, &ex.reserved)
	if err != nil || !complete || len(body) > retryBufferMax {
		// The rest of the body stays unread, or its framing broke off:
		// this connection cannot carry another request.
		w.Header().Set("Connection", "close")
		return
	}
	ex.numberID, ex.orderID = policy.AuditIDs(body)
}
