package proxy

import "context"

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
		ex.code = codeClientClosed
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
