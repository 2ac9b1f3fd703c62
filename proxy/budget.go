package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy/limit"
)

// admitUpstream applies upstream_budget (docs/upstream-budget.md) to a request
// that is about to go upstream: a route held after an upstream 429 is
// refused with upstream_throttled; a caller over its share of a limit with
// upstream_budget_exhausted. Only an admitted request counts against the
// budget, and a refused one never reaches the upstream.
func (h *Handler) admitUpstream(w *responseWriter, r *http.Request, ex *exchange) *gatewayError {
	rules := ex.rules
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
