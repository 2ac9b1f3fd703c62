// Package proxy is faxgate's request path: it names the caller, resolves the
// request-target to exactly one route, applies policy and rate limits,
// strips caller credentials, injects the Bearer token and relays the exchange
// with the upstream (forward.go).
package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/metrics"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/proxy/listener"
	"github.com/faxgate/faxgate/tokencache"
)

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
	// RetryUnsent is upstream.retry_unsent: how many times a request the
	// upstream certainly never received is sent again (transport.go).
	RetryUnsent int
	Metrics     *Metrics
	Logger      *zap.Logger
	// ShadowAdmission is upstream admission for a shadow candidate
	// (SetShadow): the same holds, no waiting, no metrics.
	ShadowAdmission *limit.Upstream
	// Admission is upstream admission (docs/upstream-budget.md): the
	// Retry-After holds, the budget, waiting for a turn; it hears every
	// upstream answer's word on the budget. nil admits every request.
	Admission *limit.Upstream
	// AccessLog, when set, writes the access lines in place of Logger
	// (the same bytes, cheaper); nil writes them through Logger.
	AccessLog *AccessLog
	// Tracer, when set, records requests as spans (docs/tracing.md): a
	// SERVER span per request, a CLIENT span per upstream attempt, and the
	// waits; nil when tracing is off, which costs nothing.
	Tracer trace.Tracer
	// AuditLogger writes the audit lines (docs/logs.md), used as is.
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
	bufs      *arrayPool[[copyBufSize]byte] // response copy buffers
	ids       *idGen
	replay    *replayPool
	// deadlines enforces upstream.timeout on every exchange in flight.
	deadlines *deadlines
	log       *zap.Logger
	errlog    *zap.Logger // a failed read of an upstream answer
	audit     *zap.Logger
	basePath  string
	tracer    trace.Tracer // nil when tracing is off
	// shadow is the candidate in force, nil without one (shadow.go);
	// shadowSlots bounds its decisions on goroutines of their own, every
	// candidate's alike.
	shadow      atomic.Pointer[shadow]
	shadowSlots chan struct{}
}

// New builds the handler.
func New(o Options) *Handler {
	h := &Handler{
		opts:      o,
		ids:       newIDGen(),
		replay:    newReplayPool(o.ResendBufferBytes),
		deadlines: newDeadlines(o.UpstreamTimeout),
		log:       o.Logger.Named("access"),
		errlog:    o.Logger.Named("forward"),
		transport: &authTransport{next: o.Transport, tokens: o.Tokens, metrics: o.Metrics, tracer: o.Tracer,
			retryUnsent: o.RetryUnsent},
		bufs:     newArrayPool[[copyBufSize]byte](),
		audit:    o.AuditLogger,
		basePath: strings.TrimSuffix(o.Upstream.Path, "/"),
		tracer:   o.Tracer,
		// Empty elements: the channel is its header alone.
		shadowSlots: make(chan struct{}, maxShadowInFlight),
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
	h.opts.Metrics.startSeries(r)
	var prev *activityTable
	if c := h.children.Load(); c != nil {
		prev = c.activity
	}
	var callers []string
	if r != nil && r.Policy != nil {
		callers = r.Policy.Callers()
	}
	h.children.Store(newMetricCache(h.opts.Metrics, newActivityTable(callers, prev)))
	h.rules.Store(r)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	m := h.opts.Metrics
	m.Inflight.Inc()
	defer m.Inflight.Dec()
	ex := &exchange{h: h, start: time.Now(), method: metrics.Method(r.Method)}
	w := &ex.w
	w.ResponseWriter, w.ex = rw, ex
	if id := r.Header.Get("X-Request-Id"); validRequestID(id) && !h.holdsToken(id) {
		ex.id = id
	} else {
		ex.id = h.ids.next()
	}
	// One read-only slice serves the response and the upstream request.
	ex.idHeader[0] = ex.id
	w.Header()["X-Request-Id"] = ex.idHeader[:]

	// The request's facts, then who is calling: the trace of a request
	// from a peer no caller matches does not follow that peer's
	// traceparent (trace.go).
	ex.rules = h.rules.Load()
	ex.conn = listener.ConnOf(r)
	ex.facts = policy.Facts{Request: r, Head: headRefusal(r, ex.conn, ex.method != "other"),
		TooLarge: r.ContentLength > h.opts.MaxBodyBytes,
		HasBody:  r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0}
	ex.rules.Identify(&ex.facts, &ex.out)
	r = h.startTrace(r, ex)
	ex.facts.Request = r
	defer h.finish(w, r, ex)

	if ref := h.serve(w, r, ex); ref != nil {
		h.readAuditBody(w, r, ex)
		h.answer(w, ex, ref)
	}
}

// serve takes the request through its stages: the decisions (route, what
// the head earns, policy, rate limit: policy.Rules.Decide), the body once
// they allow it, what the body earns (confirmation, upstream admission:
// Decide again), then the gateway's own answer or the forward. A non-nil
// result is the refusal to answer with; serve's caller is the one place
// that answers it (answer.go).
func (h *Handler) serve(w *responseWriter, r *http.Request, ex *exchange) *route.Error {
	out := &ex.out
	ex.rules.Decide(r.Context(), &ex.facts, h.opts.Admission, out)
	if out.NeedBody {
		if ref := ex.prepareBody(out.ReadWhole()); ref != nil {
			out.Refusal = ref
		} else {
			ex.rules.Decide(r.Context(), &ex.facts, h.opts.Admission, out)
		}
	}
	if out.Rated {
		// Every answer reports the caller's quota, refused or not.
		setRateLimitHeaders(w.Header(), out.Rate)
	}
	if out.Refusal != nil {
		return out.Refusal
	}
	if out.Local {
		h.auth(w) // POST /v1/auth with the shim: answered here, never forwarded (local.go)
		return nil
	}
	// No protocol switch passes the gateway (docs/security.md): Upgrade is
	// removed, so the forward never attempts one and the request is served
	// as the plain HTTP it also is (curl --http2 offers h2c on every request).
	delete(r.Header, "Upgrade")
	return h.forward(w, r, ex)
}
