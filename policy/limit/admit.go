package limit

// Upstream admission (docs/upstream-budget.md): what a request must pass
// just before it goes upstream, and what the upstream's answers say about
// its budget. One capability owns it all: the Retry-After holds, the
// budget's windows, waiting for a turn, and their metrics and spans. A
// request asks it once (Admit); an upstream answer is reported to it once
// (Answered).

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/faxgate/faxgate/internal/base/tracing"
	"github.com/faxgate/faxgate/internal/config"
)

// UpstreamRules are the upstream_budget section compiled: what decides a
// request's admission under the rules in force.
type UpstreamRules struct {
	// Budget is the limits' windows; nil when there are none.
	Budget Budget
	// Limits are the limits' names, in the file's order: the limit label
	// values the config makes known.
	Limits []string
	// HonorRetryAfter and MaxHold: an upstream 429 holds its route for its
	// Retry-After, at most MaxHold.
	HonorRetryAfter bool
	MaxHold         time.Duration
	// MaxWait and MaxWaiting: with MaxWait > 0 a request a hold or a limit
	// refuses waits for its turn instead (Waitlist).
	MaxWait    time.Duration
	MaxWaiting int
	// RetryThrottled: a vendor 429 is waited out and the request sent
	// again when it fits in max_wait (the request path's part: its body).
	RetryThrottled bool
}

// CompileUpstream compiles the upstream_budget section around budget, the
// windows built for it (NewBudget).
func CompileUpstream(b config.UpstreamBudget, budget Budget) UpstreamRules {
	names := make([]string, 0, len(b.Limits))
	for _, l := range b.Limits {
		names = append(names, l.Name)
	}
	return UpstreamRules{Budget: budget, Limits: names, HonorRetryAfter: b.HonorRetryAfter, MaxHold: b.MaxHold,
		MaxWait: b.MaxWait, MaxWaiting: b.MaxWaiting, RetryThrottled: b.RetryThrottled}
}

// Departure tells whether a request's caller has left. A request whose body
// is still unread cannot see its caller leave through its context (net/http
// notices a closed connection only once the body is consumed); a waiting
// one asks this before each turn, so a departed caller is not counted.
type Departure interface {
	Gone() bool
}

// AdmitRequest is one request asking to go upstream.
type AdmitRequest struct {
	Caller, Route string
	Rules         *UpstreamRules
	// Departure, when set, is asked before each turn of a wait.
	Departure Departure
	// Resend: the vendor answered the request 429 and it waits out the
	// hold to be sent again (upstream_budget.retry_throttled): it takes
	// the head of its route's hold queue, and waits at most MaxWait.
	Resend  bool
	MaxWait time.Duration
}

// Admission is Admit's answer.
type Admission struct {
	Allowed bool
	// Throttled: the route's hold refused (upstream_throttled); otherwise
	// Limit names the limit that refused (upstream_budget_exhausted).
	Throttled bool
	Limit     string
	// RetryAfter is how long until the request could be admitted (when
	// refused).
	RetryAfter time.Duration
	// Waited is how long the request waited for its turn (0 when it did not).
	Waited time.Duration
	// Gone: the caller left while the request waited; nothing was counted.
	Gone bool
}

// UpstreamOptions configures an Upstream.
type UpstreamOptions struct {
	// Holds is the table of routes held after an upstream 429; nil holds
	// nothing.
	Holds *Holds
	// Waitlist holds the waiting requests; nil refuses at once whatever
	// max_wait says.
	Waitlist *Waitlist
	// Metrics receive the refusals, the waits and the upstream's 429s; nil
	// counts nothing (a candidate configuration's admission).
	Metrics *Metrics
	// Tracer records a wait as a "budget.wait" span under the request's
	// (docs/tracing.md); nil when tracing is off.
	Tracer trace.Tracer
	// Now is the clock a Retry-After date is read against; default time.Now.
	Now func() time.Time
}

// Upstream is upstream admission for the gateway's life, across reloads:
// the rules come with each request.
type Upstream struct {
	holds *Holds
	wait  *Waitlist
	met   *Metrics
	trace trace.Tracer
	now   func() time.Time
}

// NewUpstream builds upstream admission.
func NewUpstream(o UpstreamOptions) *Upstream {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Upstream{holds: o.Holds, wait: o.Waitlist, met: o.Metrics, trace: o.Tracer, now: o.Now}
}

// Admit decides whether req's request may go upstream now: its route's
// hold, then the budget, which counts the request when it admits it. With
// max_wait it waits for its turn when it may (Waitlist). A refusal is
// counted (faxgate_upstream_budget_refused_total) unless the caller left.
func (u *Upstream) Admit(ctx context.Context, req AdmitRequest) Admission {
	rules := req.Rules
	honour := u.holds != nil && rules.HonorRetryAfter
	if !honour && rules.Budget == nil {
		return Admission{Allowed: true}
	}
	var a Admission
	if rules.MaxWait > 0 && u.wait != nil {
		a = u.admitWaiting(ctx, req, honour)
	} else {
		a = admission(u.decide(ctx, req, honour, nil))
	}
	// A caller that left while Redis was asked, or while it waited, reads
	// no answer: nothing is counted for it.
	a.Gone = a.Gone || !a.Allowed && ctx.Err() != nil
	if !a.Allowed && !a.Gone && !a.Throttled && u.met != nil {
		u.met.BudgetRefused.WithLabelValues(req.Caller, a.Limit).Inc()
	}
	return a
}

// decide is one admission attempt: the route's hold, then the budget.
func (u *Upstream) decide(ctx context.Context, req AdmitRequest, honour bool, reserveOnly []string) Outcome {
	if honour {
		if left, held := u.holds.Held(req.Route); held {
			return Outcome{Key: HoldKey(req.Route), RetryAfter: left, Throttled: true}
		}
	}
	b := req.Rules.Budget
	if b == nil {
		return Outcome{Allowed: true}
	}
	d := b.Admit(ctx, req.Caller, req.Route, reserveOnly)
	if d.Allowed {
		return Outcome{Allowed: true}
	}
	return Outcome{Key: d.WaitKey(req.Caller), RetryAfter: d.RetryAfter, Limit: d.Limit}
}

func admission(o Outcome) Admission {
	return Admission{Allowed: o.Allowed, Throttled: o.Throttled, Limit: o.Limit, RetryAfter: o.RetryAfter}
}

// admitWaiting is Admit with upstream_budget.max_wait > 0
// (docs/upstream-budget.md#waiting-instead-of-refusing): a request the hold
// or the budget refuses waits for its turn when its admission time is within
// max_wait and there is room for it among max_waiting waiters.
func (u *Upstream) admitWaiting(ctx context.Context, req AdmitRequest, honour bool) Admission {
	rules := req.Rules
	keys, reserved, first := WaitKeys(rules.Budget, req.Caller, req.Route, honour)
	wr := WaitRequest{Caller: req.Caller, MaxWait: rules.MaxWait, MaxWaiting: rules.MaxWaiting,
		Keys: keys, Reserved: reserved, First: first, Head: req.Resend}
	if req.Resend {
		wr.MaxWait = req.MaxWait
	}
	waitCtx := ctx
	var cancel context.CancelFunc
	if req.Departure != nil {
		waitCtx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	var refusedBy Outcome // the last refusal, for the wait's span
	out, waited := u.wait.Admit(waitCtx, wr, func(ctx context.Context, reserveOnly []string) Outcome {
		if req.Departure != nil && req.Departure.Gone() {
			cancel()
			return Outcome{}
		}
		o := u.decide(ctx, req, honour, reserveOnly)
		if !o.Allowed {
			refusedBy = o
		}
		return o
	})
	a := admission(out)
	a.Waited = waited
	a.Gone = waitCtx.Err() != nil
	if waited > 0 {
		u.traceWait(ctx, time.Now(), waited, refusedBy, a)
		if a.Allowed && u.met != nil {
			u.met.BudgetWait.WithLabelValues(req.Caller).Observe(waited.Seconds())
		}
	}
	return a
}

// Answered takes what an upstream answer on route says about the budget: a
// 429 is counted (faxgate_upstream_throttled_total) and, when rules honour
// it, holds the route for its Retry-After (retryAfter, the header's value).
func (u *Upstream) Answered(route string, rules *UpstreamRules, status int, retryAfter string) {
	if status != 429 {
		return
	}
	if u.met != nil {
		u.met.UpstreamThrottled.WithLabelValues(route).Inc()
	}
	if u.holds != nil && rules.HonorRetryAfter {
		u.holds.Hold(route, RetryAfter(retryAfter, u.now(), rules.MaxHold))
	}
}

// traceWait records, after the fact, the wait of a request that waited for
// its turn until end as a "budget.wait" span under the request's: its cause
// is what refused it last ("hold" for a Retry-After hold, "budget" for a
// limit's window, or "queued" when it only waited behind earlier waiters),
// its outcome "admitted", "refused" or "caller_gone". It records nothing for
// no wait, with tracing off or for an unsampled request, and then costs
// nothing.
func (u *Upstream) traceWait(ctx context.Context, end time.Time, waited time.Duration, refusedBy Outcome, a Admission) {
	if waited <= 0 || u.trace == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	cause := "queued"
	switch {
	case refusedBy.Throttled:
		cause = "hold"
	case refusedBy.Limit != "":
		cause = "budget"
	}
	outcome := "refused"
	switch {
	case a.Allowed:
		outcome = "admitted"
	case a.Gone:
		outcome = "caller_gone"
	}
	_, span := u.trace.Start(ctx, "budget.wait", trace.WithTimestamp(end.Add(-waited)))
	attrs := []attribute.KeyValue{attribute.String("faxgate.wait.cause", cause),
		tracing.Result.String(outcome), attribute.Float64("faxgate.wait.seconds", waited.Seconds())}
	if refusedBy.Limit != "" {
		attrs = append(attrs, tracing.Limit.String(refusedBy.Limit))
	}
	span.SetAttributes(attrs...)
	span.End(trace.WithTimestamp(end))
}
