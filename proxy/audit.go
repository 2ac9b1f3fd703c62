package proxy

import (
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy"
)

// writeAudit writes the one audit line of a request to a sensitive route
// (docs/logs.md, Audit lines). decision says what the upstream may have done:
// "denied", it never saw the request; "forwarded", it answered
// (upstream_status); "unknown", the request went to it but no answer came
// back (a timeout, a reset, the caller leaving), so the action may have
// happened. An auditor must never read "denied" for a delete that may have
// been carried out.
func (h *Handler) writeAudit(ex *exchange, status int) {
	decision, reason := auditDecision(ex)
	fields := []zap.Field{
		zap.String("request_id", ex.id),
		zap.String("caller", ex.out.Caller),
		zap.String("route", ex.out.AuditRoute),
		zap.String("decision", decision),
		zap.String("reason", reason),
		zap.Int("status", status),
		zap.Int("upstream_status", ex.leg.upstreamStatus),
	}
	if ex.hasID {
		fields = append(fields, traceFields(ex)...)
	}
	if ex.out.Decision.AuditIDs {
		num, order := ex.out.NumberID, ex.out.OrderID
		if num == "" && order == "" && ex.leg.buffered != nil {
			num, order = policy.AuditIDs(ex.leg.buffered)
		}
		if h.holdsToken(num + order) {
			// A token split across the two values is still a token in the log.
			num, order = "[redacted]", "[redacted]"
		}
		fields = append(fields, zap.String("number_id", h.auditValue(num)), zap.String("order_id", h.auditValue(order)))
	}
	h.audit.Info("audit", fields...)
}

// auditDecision is the audit line's decision and reason (writeAudit), also
// the SERVER span's faxgate.decision.
func auditDecision(ex *exchange) (decision, reason string) {
	decision, reason = "denied", ex.code
	switch {
	case ex.leg.upstreamStatus != 0:
		decision, reason = "forwarded", ""
	case ex.leg.tok != nil:
		// The transport records the token just before the upstream call, so
		// the request was on its way.
		decision = "unknown"
	}
	return decision, reason
}

// traceFields are the audit line's trace_id, and span_id with tracing on.
func traceFields(ex *exchange) []zap.Field {
	trace, span := ex.idStrings()
	f := []zap.Field{zap.String("trace_id", trace)}
	if span != "" {
		f = append(f, zap.String("span_id", span))
	}
	return f
}

// maxAuditValue bounds a caller-chosen value in the audit line: a real ID is
// short, and a megabyte-long one must not become a megabyte-long log line.
const maxAuditValue = 256

// auditValue is v as the audit line may hold it: never a value containing
// the current token (checked on the whole value, before shortening), and
// never longer than maxAuditValue bytes.
func (h *Handler) auditValue(v string) string {
	if h.holdsToken(v) {
		return "[redacted]"
	}
	if len(v) > maxAuditValue {
		return v[:maxAuditValue] + "[truncated]"
	}
	return v
}

// readAuditBody reads, for the audit line, the body of a refused request
// whose audit line carries number_id and order_id (docs/logs.md: also when
// the request is denied). It is bounded like the replay buffer: 1 MiB,
// server.max_body_bytes, the read timeout between reads and the overall
// deadline. It reads nothing when the head itself was refused (headRefusal,
// the method aside: the framing or size is in doubt and the connection
// closes), when the body is known to
// be too large, when the body was already read, or when the caller waits for
// 100 Continue: asking for a body only to refuse it would contradict that.
func (h *Handler) readAuditBody(w *responseWriter, r *http.Request, ex *exchange) {
	if !ex.out.Decision.AuditIDs || ex.leg.body.rc != nil || ex.leg.buffered != nil ||
		r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.ContentLength > retryBufferMax ||
		r.ContentLength > h.opts.MaxBodyBytes {
		return
	}
	if f := ex.facts.Head; f != nil && f != errMethod {
		return // the head's framing or size is in doubt (a refused method leaves it sound)
	}
	if ascii.EqualFold(strings.TrimSpace(r.Header.Get("Expect")), "100-continue") {
		return
	}
	ex.leg.body = requestBody{rc: r.Body, ctl: http.NewResponseController(w.ResponseWriter),
		timeout: h.opts.ReadTimeout, limit: min(h.opts.MaxBodyBytes, retryBufferMax),
		hardDeadline: ex.start.Add(h.opts.UpstreamTimeout)}
	// Counted with every other body copy, never forced: when the memory is
	// spoken for, a refused caller's audit line goes without its IDs
	// rather than holding memory for it.
	body, complete, err := h.replay.readAll(&ex.leg.body, retryBufferMax, r.ContentLength, false, &ex.leg.reserved)
	if err != nil || !complete || len(body) > retryBufferMax {
		// The rest of the body stays unread, or its framing broke off:
		// this connection cannot carry another request.
		w.Header().Set("Connection", "close")
		return
	}
	ex.out.NumberID, ex.out.OrderID = policy.AuditIDs(body)
}

// holdsToken reports whether s, a value the caller chose that the gateway
// logs (request ID, number_id, order_id), contains the current token: a
// caller that knows the token must not get it written into the logs.
func (h *Handler) holdsToken(s string) bool {
	tok := h.opts.Tokens.Current()
	return tok != nil && tok.Value.Reveal() != "" && strings.Contains(s, tok.Value.Reveal())
}
