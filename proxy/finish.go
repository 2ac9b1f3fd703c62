package proxy

import (
	"net/http"
	"time"

	"go.uber.org/zap"
)

// finish is the observe stage, run whatever serve did: it writes the
// access line, the audit line and the request metrics.
func (h *Handler) finish(w *responseWriter, r *http.Request, ex *exchange) {
	if ex.leg.replay != nil {
		// The forward has returned (or never ran): no first attempt reads
		// the body any more, and no resend can start.
		ex.leg.replay.attemptDone()
		ex.leg.replay.done()
	}
	if ex.leg.reserved != 0 {
		// Counted until now: the handler is done with the body's copy (a
		// resend still reading it holds it only a moment longer).
		h.replay.release(ex.leg.reserved)
	}
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	now := time.Now()
	elapsed := now.Sub(ex.start)
	pm := ex.pm
	if pm == nil { // refused before the pair was looked up
		pm = h.children.Load().pair(ex.out.Caller, ex.out.Route)
	}
	pm.request(ex.method, status).Inc()
	pm.duration.Observe(elapsed.Seconds())
	denied := ex.code != "" && ex.code != codeClientClosed
	pm.activity.record(now, denied, denied && ex.code == codeRateLimited)
	ex.status, ex.elapsed = status, elapsed
	h.shadowAndLog(r.Context(), ex, now) // the candidate's decision, when one is in force, then the access line
	if ex.out.AuditRoute != "" {
		h.writeAudit(ex, status)
	}
	if ex.span != nil {
		h.endTrace(ex, status)
	}
}

// accessLine writes ex's access line (docs/logs.md), stamped now.
func (h *Handler) accessLine(ex *exchange, now time.Time) {
	if al := h.opts.AccessLog; al != nil {
		al.write(now, ex)
	} else if ce := h.log.Check(zap.InfoLevel, "request"); ce != nil {
		// The field lives in the exchange: a variadic argument would be
		// allocated on every request.
		ex.logField[0] = zap.Inline(accessLine{ex})
		ce.Write(ex.logField[:]...)
	}
}
