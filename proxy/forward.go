package proxy

import (
	"context"
	"net/http"
	"time"

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
	l.spent = time.Since(ex.start) - ex.out.Admission.Waited
	ctx := h.begin(r, ex, l.spent)
	defer l.endDeadline(h.deadlines)
	for {
		res, err := h.send(r, ex, ctx)
		ex.pm = h.children.Load().answered(ex.out.Caller, ex.out.Route, l, res)
		if err != nil {
			return h.failed(ex, err)
		}
		if res.StatusCode == http.StatusTooManyRequests && h.opts.Admission != nil {
			// The vendor's word on the budget: its 429 holds the route.
			h.opts.Admission.Answered(ex.out.Route, &ex.rules.Upstream, res.StatusCode, res.Header.Get("Retry-After"))
			var again bool
			var ref *route.Error
			if res, again, ref = h.waitOut(r, ex, res); ref != nil {
				return ref
			} else if again {
				ctx = l.deadline
				continue
			}
		}
		h.relay(w, r, ex, res)
		return nil
	}
}

// begin starts the upstream leg's deadline: upstream.timeout less spent,
// the time the exchange has already taken (the caller's body read before
// it, an earlier attempt), the waits for the budget aside. A caller sees at
// most max_wait + upstream.timeout (docs/upstream-budget.md).
func (h *Handler) begin(r *http.Request, ex *exchange, spent time.Duration) context.Context {
	l := &ex.leg
	ctx := h.deadlines.begin(&l.up, r.Context())
	l.began = time.Now()
	if spent > slowStart {
		// Rare, so a timer of its own: the deadlines list runs every
		// exchange's timeout from its start.
		ctx, l.cancelDeadline = context.WithDeadline(ctx, l.began.Add(h.opts.UpstreamTimeout-spent))
	}
	l.deadline = ctx
	return ctx
}

// endDeadline ends the upstream leg's deadline (begin); again is harmless.
func (l *leg) endDeadline(d *deadlines) {
	d.end(&l.up)
	if l.cancelDeadline != nil {
		l.cancelDeadline()
		l.cancelDeadline = nil
	}
}

// slowStart is how long the decisions and a body read whole may take before
// the forward counts that time against upstream.timeout. Below it the
// deadlines list's timeout from the forward's start holds, which costs no
// timer per request.
const slowStart = 50 * time.Millisecond
