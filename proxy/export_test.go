package proxy

import (
	"time"

	"go.uber.org/zap"
)

// AccessFields are an access line's values, for tests outside the package.
type AccessFields struct {
	ID, Caller, Route, Method, Code  string
	Status, UpstreamStatus, Attempts int
	Elapsed, Waited                  time.Duration
	BytesIn, BytesOut                int64
	// TraceID and SpanID, when not zero, are the line's trace_id and
	// span_id (a span ID only with a trace ID, as the handler sets them).
	TraceID [16]byte
	SpanID  [8]byte
}

func (f AccessFields) exchange() *exchange {
	ex := &exchange{id: f.ID, method: f.Method, code: f.Code, status: f.Status, elapsed: f.Elapsed}
	ex.out.Caller, ex.out.Route, ex.out.Admission.Waited = f.Caller, f.Route, f.Waited
	ex.leg.upstreamStatus, ex.leg.attempts = f.UpstreamStatus, f.Attempts
	ex.leg.body.n, ex.w.bytes = f.BytesIn, f.BytesOut
	ex.traceID, ex.spanID, ex.hasID = f.TraceID, f.SpanID, f.TraceID != [16]byte{}
	return ex
}

// WriteAccessLine writes f's access line through a, stamped now.
func WriteAccessLine(a *AccessLog, now time.Time, f AccessFields) { a.write(now, f.exchange()) }

// WriteAccessLineZap writes f's access line through l, as the handler does
// when it has no AccessLog.
func WriteAccessLineZap(l *zap.Logger, f AccessFields) {
	l.Info("request", zap.Inline(accessLine{f.exchange()}))
}

// BodyMemoryHeld is the body memory counted under
// server.resend_buffer_bytes right now.
func (h *Handler) BodyMemoryHeld() int64 { return h.replay.held.Load() }
