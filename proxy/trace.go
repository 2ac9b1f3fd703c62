package proxy

import (
	"net/http"
	"strconv"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/faxgate/faxgate/internal/base/tracing"
)

// The request's trace (docs/tracing.md). With tracing off (no Tracer) the
// only work is reading a caller's traceparent for the log lines, without
// allocating; with tracing on, every request gets a SERVER span (recorded
// when sampled), every upstream attempt a CLIENT span whose context goes
// upstream as traceparent, and waits get spans of their own.

// traceContext is the W3C Trace Context propagator; it holds no state.
var traceContext propagation.TraceContext

// headerCarrier carries the Trace Context headers in an http.Header by
// their canonical keys: propagation.HeaderCarrier's Get and Set would
// canonicalize "traceparent" into a new string on every request.
type headerCarrier http.Header

var _ propagation.TextMapCarrier = headerCarrier(nil)

func canonicalTraceKey(k string) string {
	switch k {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	}
	return http.CanonicalHeaderKey(k)
}

func (c headerCarrier) Get(k string) string {
	if vs := c[canonicalTraceKey(k)]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (c headerCarrier) Set(k, v string) { c[canonicalTraceKey(k)] = []string{v} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// serverSpan are the SERVER span's options, built once: a variadic
// argument would be allocated on every request.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// traceIDs is what a request's log lines carry of its trace.
type traceIDs struct {
	span    trace.Span // the SERVER span; nil when tracing is off
	traceID trace.TraceID
	spanID  trace.SpanID // valid only with tracing on
	hasID   bool         // traceID is set
	hex     [48]byte     // the IDs in hex, for idStrings
}

// idStrings returns the IDs in hex ("" for a span ID not set), in
// memory of the exchange: TraceID.String would allocate on every line.
// The strings live as long as the exchange, which is never reused.
func (t *traceIDs) idStrings() (trace, span string) {
	tracing.AppendHex(t.hex[:0], t.traceID[:])
	trace = unsafe.String(&t.hex[0], 32)
	if t.spanID.IsValid() {
		tracing.AppendHex(t.hex[32:32], t.spanID[:])
		span = unsafe.String(&t.hex[32], 16)
	}
	return trace, span
}

// startTrace runs at the start of a request, once its caller is known. With
// tracing off it reads the caller's traceparent (a valid one puts its trace
// ID on the log lines); with tracing on it starts the SERVER span, as a
// child of a valid traceparent, and returns r with the span in its context.
//
// A request from a peer that no caller matches (policy.Outcome.Identified
// false) is a trace of its own, sampled at sample_ratio whatever its traceparent says:
// an anonymous client must not force spans into the export queue, nor
// hang them on somebody else's trace (docs/tracing.md#sampling).
func (h *Handler) startTrace(r *http.Request, ex *exchange) *http.Request {
	if h.tracer == nil {
		if vs := r.Header["Traceparent"]; len(vs) == 1 {
			ex.traceID, ex.hasID = tracing.ParseTraceparent(vs[0])
		}
		return r
	}
	ctx := r.Context()
	if ex.out.Identified {
		ctx = traceContext.Extract(ctx, headerCarrier(r.Header))
	}
	// The name is settled in endTrace, once the route is known; the
	// sampler sees the method only.
	ctx, span := h.tracer.Start(ctx, ex.method, serverSpan...)
	sc := span.SpanContext()
	ex.span, ex.traceID, ex.spanID, ex.hasID = span, sc.TraceID(), sc.SpanID(), true
	return r.WithContext(ctx)
}

// endTrace ends the SERVER span with what the request came to. Only a
// recorded span gets its name and attributes: an unsampled request costs
// no more here.
func (h *Handler) endTrace(ex *exchange, status int) {
	span := ex.span
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetName(ex.method + " " + ex.out.Route)
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs,
		attribute.String("http.request.method", ex.method),
		attribute.Int("http.response.status_code", status),
		tracing.Caller.String(ex.out.Caller))
	if tmpl := routeTemplate(ex); tmpl != "" {
		attrs = append(attrs, attribute.String("http.route", tmpl))
	}
	if ex.code != "" {
		attrs = append(attrs, tracing.Error.String(ex.code))
	}
	if ex.out.AuditRoute != "" {
		decision, _ := auditDecision(ex)
		attrs = append(attrs, tracing.Decision.String(decision))
	}
	span.SetAttributes(attrs...)
	if status >= 500 {
		desc := ex.code
		if desc == "" {
			desc = "upstream answered " + strconv.Itoa(status)
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End()
}

// routeTemplate is the path template of ex's route, "" when the request
// resolved to no route of the table (unmatched, or refused before).
func routeTemplate(ex *exchange) string {
	if ex.rules == nil || ex.out.Target.Route == "" {
		return ""
	}
	return ex.rules.Table.Template(ex.out.Target.Route)
}
