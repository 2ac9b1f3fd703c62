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

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/metrics"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/policy/route"
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
	Metrics           *Metrics
	Logger            *zap.Logger
	// Holds is the table of routes held after an upstream 429
	// (docs/upstream-budget.md); nil holds nothing.
	Holds *limit.Holds
	// Waitlist holds the requests waiting for their turn with
	// upstream_budget.max_wait > 0 (docs/upstream-budget.md); nil refuses
	// at once whatever max_wait says.
	Waitlist *limit.Waitlist
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
	bufs      *bufferPool // response copy buffers
	ids       *idGen
	replay    *replayPool
	// deadlines enforces upstream.timeout on every exchange in flight.
	deadlines *deadlines
	log       *zap.Logger
	errlog    *zap.Logger // a failed read of an upstream answer
	audit     *zap.Logger
	basePath  string
	tracer    trace.Tracer // nil when tracing is off
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
		transport: &authTransport{next: o.Transport, tokens: o.Tokens, metrics: o.Metrics, tracer: o.Tracer},
		bufs:      newBufferPool(),
		audit:     o.AuditLogger,
		basePath:  strings.TrimSuffix(o.Upstream.Path, "/"),
		tracer:    o.Tracer,
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
	ex := &exchange{start: time.Now(), caller: config.UnidentifiedCaller, route: "none", method: metrics.Method(r.Method)}
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
	// Who is calling is settled first: the trace of a request from a peer no
	// caller matches does not follow that peer's traceparent (trace.go).
	rules := h.rules.Load()
	ex.rules = rules
	name, _, identified := rules.Identifier.Identify(r)
	if identified {
		ex.caller = name
	}
	r = h.startTrace(r, ex, identified)
	defer h.finish(w, r, ex)

	if ge := h.serve(w, r, ex, identified); ge != nil {
		h.readAuditBody(w, r, ex)
		h.refuse(w, ex, ge)
	}
}

// serve takes the request through its stages, in order, and forwards it; a
// non-nil result is the refusal to answer with. The order of the refusals
// is part of the gateway's answers: a request that fails two checks is
// answered for the first.
func (h *Handler) serve(w *responseWriter, r *http.Request, ex *exchange, identified bool) *gatewayError {
	rules, name := ex.rules, ex.caller

	// Identify (ServeHTTP) and route. Who is calling and which route the
	// path names are settled before any refusal, so that every refusal of a
	// request to a sensitive route is audited with its caller and route
	// (docs/logs.md, Audit lines).
	tgt, perr := rules.Resolve(r.Method, r.RequestURI)
	if perr == nil {
		ex.target, ex.route = tgt, tgt.Route
		if base := rules.Policy.Base(tgt.Route); base.Sensitive {
			ex.auditRoute = tgt.Route
			ex.auditIDs = policy.AuditCarriesIDs(tgt.Route, base)
		}
	}

	// Pre-checks: what the head alone earns (precheck.go), then the
	// caller's identity and the route's resolution.
	if ge := headRefusal(r, ex.method != "other"); ge != nil {
		if ge != errMethod {
			// The head's framing or size is in doubt: nothing more is
			// read from this connection.
			w.Header().Set("Connection", "close")
		}
		return ge
	}
	if !identified {
		return errUnidentified
	}
	if perr != nil {
		return policyRefusal(perr)
	}
	if tgt.Route == route.RouteAuth {
		return h.auth(w, r, ex) // answered here, never forwarded (local.go)
	}

	// Policy: the caller's allow list, then the route's method.
	ex.decision = rules.Policy.Decide(name, tgt.Route)
	if !ex.decision.Allowed {
		return forbidden(name, tgt.Route)
	}
	if !tgt.MethodOK {
		return routeMethod(tgt.Route)
	}
	// No protocol switch passes the gateway (docs/security.md): Upgrade is
	// removed, so the forward never attempts one and the request is served
	// as the plain HTTP it also is (curl --http2 offers h2c on every request).
	delete(r.Header, "Upgrade")

	// Limit: the caller's rate (ratelimit.go).
	if ge := h.rateLimit(w, r, ex); ge != nil {
		return ge
	}

	// Body: one known to be too large is refused unread; a confirmed
	// route's headers are checked before its body is read, so that a body
	// the upstream would not read as the checked JSON is never read; then
	// the body is read whole or set to stream (body.go).
	if r.ContentLength > h.opts.MaxBodyBytes {
		w.Header().Set("Connection", "close")
		return errBodyTooLarge
	}
	if ex.decision.Confirm {
		if perr := policy.CheckConfirmHeaders(r.Header); perr != nil {
			return policyRefusal(perr)
		}
	}
	if ge := h.prepareBody(w, r, ex); ge != nil {
		return ge
	}

	// Confirm: policy.confirm on the body read (local.go).
	if ex.decision.Confirm {
		if ge := h.confirm(r, ex); ge != nil {
			return ge
		}
	}

	// Budget admission: the upstream's limits, shared among callers (budget.go).
	if ge := h.admitUpstream(w, r, ex); ge != nil {
		return ge
	}

	// Forward (forward.go).
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
