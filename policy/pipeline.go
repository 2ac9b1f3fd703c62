package policy

// The decision pipeline (docs/architecture.md): who is calling, which route
// the request names, what the head earns, may this caller call it, how fast,
// the confirmation of its body, and whether the upstream's budget admits it.
// It is one function of the request's facts, the compiled rules and the
// shared state (the upstream admission), returning an outcome: allowed, or
// the refusal with what its answer reports. It writes nothing to the
// response, so the same code decides a request under more than one
// configuration.

import (
	"context"
	"net/http"
	"time"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/policy/route"
)

// UnidentifiedCaller is the caller label of a request no caller matched.
const UnidentifiedCaller = config.UnidentifiedCaller

// Facts are what a request is, as the decisions read it: settled before
// the first decision, the same whichever configuration decides.
type Facts struct {
	// Request is the caller's request: method, target, headers, peer, TLS
	// state. The pipeline reads it and changes nothing of it.
	Request *http.Request
	// Head is the refusal the request's head alone earned (its framing,
	// version, method or size, as the request path judges them), or nil.
	Head *route.Error
	// TooLarge: the declared length is over server.max_body_bytes.
	TooLarge bool
	// HasBody: the request comes with a body. The request path reads it
	// only once the pipeline asks (Outcome.NeedBody), then sets BodyReady,
	// Body and Departure.
	HasBody   bool
	BodyReady bool
	// Body is what was read whole (a confirmed route's body, an audit
	// line's IDs, a small body); nil when the body streams.
	Body []byte
	// Departure, when set, tells whether the caller left while its body is
	// still unread: a waiting request asks it before each turn.
	Departure limit.Departure
	// BodyUnseen: the body will never be read (a shadow candidate deciding
	// a request the live configuration refused before its body): the
	// decisions that read it count as passed.
	BodyUnseen bool
}

// Outcome is what the pipeline decided for one request.
type Outcome struct {
	// Caller is the caller's name, or config.UnidentifiedCaller.
	Caller     string
	Identified bool
	// Target is the resolved request-target, and Route its route's name,
	// "unmatched", or "none" when the target resolved to no route.
	Target route.Target
	Route  string
	// AuditRoute is the sensitive route the path resolves to, whatever the
	// method and whoever the caller: "" when no audit line is due.
	AuditRoute string
	// Decision is the policy's verdict on Caller and Route; its AuditIDs
	// says the audit line names the body's number_id and order_id.
	Decision Decision
	// Rate is the caller's rate-limit decision (Rated: one was made); every
	// answer reports its quota.
	Rate  limit.RateResult
	Rated bool
	// NeedBody: the request is allowed as far as its body, which the
	// pipeline needs before it goes on (the confirmation reads it, the
	// audit line names its IDs, admission counts only what will be sent).
	// The request path prepares the body (ReadWhole: read it whole first)
	// and calls Decide again, which goes on from there.
	NeedBody bool
	// NumberID and OrderID are the confirmed body's IDs, for the audit line.
	NumberID, OrderID string
	// Admission is the upstream admission's answer, with how long the
	// request waited for it.
	Admission limit.Admission
	// Local: the gateway answers the request itself (POST /v1/auth with
	// policy.auth_endpoint: shim); nothing is forwarded.
	Local bool
	// Refusal is the gateway's answer when the request is refused, nil
	// when it may go upstream; RetryAfter goes with a hold's or the
	// budget's 429.
	Refusal    *route.Error
	RetryAfter time.Duration

	bodyStage bool // Decide got as far as the body
}

// ReadWhole reports whether the body must be read whole before the
// decision goes on: a confirmed route checks it, an audit line names its IDs.
func (o *Outcome) ReadWhole() bool { return o.Decision.Confirm || o.Decision.AuditIDs }

// Identify names the caller: the first stage, on its own so that the
// request's trace can start once its caller is known (an anonymous
// client's traceparent is not followed: docs/tracing.md).
func (r *Rules) Identify(f *Facts, o *Outcome) {
	o.Caller, o.Route = UnidentifiedCaller, "none"
	if name, _, ok := r.Identifier.Identify(f.Request); ok {
		o.Caller, o.Identified = name, true
	}
}

// Decide takes an identified request (Identify) through the other stages,
// in order, and stops at the first refusal. The order of the refusals is
// part of the gateway's answers: a request that fails two checks is
// answered for the first. It stops, too, where it needs the body and
// f.BodyReady is false (Outcome.NeedBody); called again once the body is
// ready, it goes on from there. up is the upstream admission (holds,
// waits); nil admits without asking it.
func (r *Rules) Decide(ctx context.Context, f *Facts, up *limit.Upstream, o *Outcome) {
	if !o.bodyStage {
		if !r.decideHead(ctx, f, o) {
			return
		}
		o.bodyStage = true
	}
	if f.HasBody && !f.BodyReady && !f.BodyUnseen {
		o.NeedBody = true
		return
	}
	o.NeedBody = false

	// Confirm: policy.confirm on the body read whole
	// (docs/callers-and-policy.md, Granting numbers.delete).
	if o.Decision.Confirm && !f.BodyUnseen {
		if f.Body == nil && f.HasBody {
			// Over the 1 MiB read whole: far larger than any delete body.
			o.Refusal = errConfirmBodyTooLarge
			return
		}
		confirm := ""
		if vs := f.Request.Header.Values(ConfirmHeader); len(vs) == 1 {
			confirm = vs[0]
		}
		var perr *route.Error
		if o.NumberID, o.OrderID, perr = CheckConfirm(o.Target.RawQuery, f.Body, confirm); perr != nil {
			o.Refusal = perr
			return
		}
	}

	// Upstream admission: the holds and the budget, shared among callers,
	// waiting for a turn with max_wait.
	if up == nil {
		return
	}
	a := up.Admit(ctx, limit.AdmitRequest{Caller: o.Caller, Route: o.Route, Rules: &r.Upstream, Departure: f.Departure})
	o.Admission = a
	switch {
	case a.Allowed:
	case a.Gone:
		o.Refusal = errClientClosed
	case a.Throttled:
		o.Refusal, o.RetryAfter = &route.Error{Status: http.StatusTooManyRequests, Code: route.CodeUpstreamThrottled,
			Message: "the upstream answered 429 on route " + o.Route + "; it is held until its Retry-After passes"}, a.RetryAfter
	default:
		o.Refusal, o.RetryAfter = &route.Error{Status: http.StatusTooManyRequests, Code: route.CodeBudgetExhausted,
			Message: "caller " + o.Caller + " has used its share of upstream budget " + a.Limit}, a.RetryAfter
	}
}

// decideHead decides what the head alone settles: the route, what the head
// earned, the caller's identity and grants, the route's method, the
// caller's rate, the declared size, and a confirmed route's headers. It
// reports whether the request is still allowed.
func (r *Rules) decideHead(ctx context.Context, f *Facts, o *Outcome) bool {
	req := f.Request
	// The route is settled before any refusal, so that every refusal of a
	// request to a sensitive route is audited with its caller and route
	// (docs/logs.md, Audit lines). An unidentified caller is allowed
	// nothing, but its request to a sensitive route is still audited.
	tgt, perr := r.resolver.Resolve(req.Method, req.RequestURI)
	if perr == nil {
		o.Target, o.Route = tgt, tgt.Route
		o.Decision = r.Policy.Decide(o.Caller, tgt.Route)
		if o.Decision.Sensitive {
			o.AuditRoute = tgt.Route
		}
	}
	switch {
	case f.Head != nil:
		o.Refusal = f.Head
	case !o.Identified:
		o.Refusal = errUnidentified
	case perr != nil:
		o.Refusal = perr
	case tgt.Route == route.RouteAuth:
		// Never forwarded for a caller; with the shim answered locally.
		switch {
		case !r.AuthShim:
			o.Refusal = errAuthManaged
		case req.Method != http.MethodPost:
			o.Refusal = routeMethod(route.RouteAuth)
		default:
			o.Local = true
		}
	case !o.Decision.Allowed:
		o.Refusal = &route.Error{Status: http.StatusForbidden, Code: route.CodeForbidden,
			Message: "caller " + o.Caller + " may not call " + tgt.Route}
	case !tgt.MethodOK:
		o.Refusal = routeMethod(tgt.Route)
	}
	if o.Refusal != nil || o.Local {
		return false
	}
	// Limit: the caller's rate.
	if r.Limiter != nil {
		o.Rate, o.Rated = r.Limiter.Allow(ctx, o.Caller), true
		if !o.Rate.Allowed {
			o.Refusal = &route.Error{Status: http.StatusTooManyRequests, Code: route.CodeRateLimited,
				Message: "rate limit exceeded for caller " + o.Caller}
			return false
		}
	}
	// Body: one known to be too large is refused unread; a confirmed
	// route's headers are checked before its body is read, so that a body
	// the upstream would not read as the checked JSON is never read.
	if f.TooLarge {
		o.Refusal = errBodyTooLarge
		return false
	}
	if o.Decision.Confirm {
		if o.Refusal = CheckConfirmHeaders(req.Header); o.Refusal != nil {
			return false
		}
	}
	return true
}

// routeMethod is the refusal of a method route does not have.
func routeMethod(r string) *route.Error {
	return &route.Error{Status: http.StatusMethodNotAllowed, Code: route.CodeMethodNotAllowed,
		Message: "method not allowed for route " + r}
}
