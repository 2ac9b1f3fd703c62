package proxy

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/proxy/listener"
)

// admitUpstream applies upstream_budget (docs/upstream-budget.md) to a request
// that is about to go upstream: a route held after an upstream 429 is
// refused with upstream_throttled; a caller over its share of a limit with
// upstream_budget_exhausted. Only an admitted request counts against the
// budget, and a refused one never reaches the upstream.
func (h *Handler) admitUpstream(w *responseWriter, r *http.Request, ex *exchange) *gatewayError {
	rules := ex.rules
	if rules.MaxWait > 0 && h.opts.Waitlist != nil {
		return h.admitWaiting(w, r, ex)
	}
	if hs := h.opts.Holds; hs != nil && rules.HonorRetryAfter {
		if left, held := hs.Held(ex.route); held {
			w.Header()["Retry-After"] = []string{ascii.Itoa(max(1, ceilSeconds(left)))}
			return upstreamThrottled(ex.route)
		}
	}
	if rules.Budget == nil {
		return nil
	}
	d := rules.Budget.Admit(r.Context(), ex.caller, ex.route)
	if d.Allowed {
		return nil
	}
	w.Header()["Retry-After"] = []string{ascii.Itoa(max(1, ceilSeconds(d.RetryAfter)))}
	if r.Context().Err() == nil { // not a caller that left while the budget was asked
		h.opts.Metrics.BudgetRefused.WithLabelValues(ex.caller, d.Limit).Inc()
	}
	return budgetExhausted(ex.caller, d.Limit)
}

// admitWaiting is admitUpstream with upstream_budget.max_wait > 0
// (docs/upstream-budget.md#waiting-instead-of-refusing): a request the hold
// or the budget refuses waits for its turn in the Waitlist when its
// admission time is within max_wait and fewer than max_waiting wait here;
// otherwise, and when its wait ends refused, it gets the answer
// admitUpstream gives.
func (h *Handler) admitWaiting(w *responseWriter, r *http.Request, ex *exchange) *gatewayError {
	rules := ex.rules
	honour := h.opts.Holds != nil && rules.HonorRetryAfter
	if !honour && rules.Budget == nil {
		return nil
	}
	keys, reserved, first := limit.WaitKeys(rules.Budget, ex.caller, ex.route, honour)
	req := limit.WaitRequest{Caller: ex.caller, MaxWait: rules.MaxWait, MaxWaiting: rules.MaxWaiting,
		Keys: keys, Reserved: reserved, First: first}
	// A body still unread hides the caller's close from net/http: such a
	// waiter asks the connection before each turn, and leaves uncounted
	// when its caller is gone.
	ctx, unread := r.Context(), r.ContentLength != 0 && ex.buffered == nil && r.Body != http.NoBody
	var cancel context.CancelFunc
	if unread {
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	var refusedBy limit.Outcome // the last refusal, for the wait's span
	out, waited := h.opts.Waitlist.Admit(ctx, req, func(ctx context.Context) limit.Outcome {
		if unread && listener.PeerClosed(r) {
			cancel()
			return limit.Outcome{}
		}
		o := h.decideUpstream(ctx, ex, honour)
		if !o.Allowed {
			refusedBy = o
		}
		return o
	})
	ex.waited = waited
	if waited > 0 {
		h.traceBudgetWait(r.Context(), waited, refusedBy, out, ctx.Err() != nil)
	}
	if out.Allowed {
		if waited > 0 {
			h.opts.Metrics.BudgetWait.WithLabelValues(ex.caller).Observe(waited.Seconds())
		}
		return nil
	}
	w.Header()["Retry-After"] = []string{ascii.Itoa(max(1, ceilSeconds(out.RetryAfter)))}
	if out.Throttled {
		return upstreamThrottled(ex.route)
	}
	if ctx.Err() == nil { // not a caller that left while it waited
		h.opts.Metrics.BudgetRefused.WithLabelValues(ex.caller, out.Limit).Inc()
	}
	return budgetExhausted(ex.caller, out.Limit)
}

// decideUpstream is one admission attempt: the route's hold, then the
// budget, which counts the request when it admits it.
func (h *Handler) decideUpstream(ctx context.Context, ex *exchange, honour bool) limit.Outcome {
	if honour {
		if left, held := h.opts.Holds.Held(ex.route); held {
			return limit.Outcome{Key: limit.HoldKey(ex.route), RetryAfter: left, Throttled: true}
		}
	}
	b := ex.rules.Budget
	if b == nil {
		return limit.Outcome{Allowed: true}
	}
	d := b.Admit(ctx, ex.caller, ex.route)
	if d.Allowed {
		return limit.Outcome{Allowed: true}
	}
	return limit.Outcome{Key: d.WaitKey(ex.caller), RetryAfter: d.RetryAfter, Limit: d.Limit}
}

// observeUpstream reads what the upstream says about its budget: a 429 holds
// the route (when honoured), and X-RateLimit-Remaining is exported.
func (h *Handler) observeUpstream(ex *exchange, res *http.Response) {
	m := h.opts.Metrics
	// The canonical key, looked up directly: Get would canonicalize
	// "X-RateLimit-Remaining" into a new string on every response.
	if vs := res.Header["X-Ratelimit-Remaining"]; len(vs) > 0 && vs[0] != "" {
		if n, err := strconv.ParseInt(vs[0], 10, 64); err == nil && n >= 0 {
			ex.pm.rateLimitRemaining().Set(float64(n))
		}
	}
	if res.StatusCode != http.StatusTooManyRequests {
		return
	}
	m.UpstreamThrottled.WithLabelValues(ex.route).Inc()
	if h.opts.Holds != nil && ex.rules.HonorRetryAfter {
		h.opts.Holds.Hold(ex.route, limit.RetryAfter(res.Header.Get("Retry-After"), time.Now(), ex.rules.MaxHold))
	}
}

func upstreamThrottled(route string) *gatewayError {
	return &gatewayError{http.StatusTooManyRequests, "upstream_throttled",
		"the upstream answered 429 on route " + route + "; it is held until its Retry-After passes"}
}

func budgetExhausted(caller, limit string) *gatewayError {
	return &gatewayError{http.StatusTooManyRequests, "upstream_budget_exhausted",
		"caller " + caller + " has used its share of upstream budget " + limit}
}
