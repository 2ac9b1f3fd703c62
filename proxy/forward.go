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
	ex.pm = h.children.Load().answered(ex.out.Caller, ex.out.Route, l, res)
	if err != nil {
		return h.failed(ex, err)
	}
	if res.StatusCode == http.StatusTooManyRequests && h.opts.Admission != nil {
		// The vendor's word on the budget: its 429 holds the route.
		h.opts.Admission.Answered(ex.out.Route, &ex.rules.Upstream, res.StatusCode, res.Header.Get("Retry-After"))
	}
	h.relay(w, r, ex, res)
	return nil
}

// slowStart is how long the decisions and a body read whole may take before
// the forward counts that time against upstream.timeout. Below it the
// deadlines list's timeout from the forward's start holds, which costs no
// timer per request.
const slowStart = 50 * time.Millisecond
