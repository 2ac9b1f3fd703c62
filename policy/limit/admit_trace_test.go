package limit

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// The wait recorded after the fact: its span spans the wait, under the
// request's; no wait, tracing off or an unsampled request record nothing,
// and allocate nothing.
func TestTraceWaitSpansTheWait(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	u := NewUpstream(UpstreamOptions{Tracer: tp.Tracer("test")})
	ctx, req := tp.Tracer("test").Start(context.Background(), "POST contacts.list")
	end := time.Now()
	u.traceWait(ctx, end, 1500*time.Millisecond, Outcome{Throttled: true}, Admission{Allowed: true})
	u.traceWait(ctx, end, 0, Outcome{Limit: "tenant"}, Admission{Allowed: true}) // no wait: no span
	req.End()
	var waits []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "budget.wait" {
			waits = append(waits, s)
		}
	}
	if len(waits) != 1 {
		t.Fatalf("%d budget.wait spans, want 1", len(waits))
	}
	w := waits[0]
	if w.Parent().SpanID() != req.SpanContext().SpanID() || !w.EndTime().Equal(end) || w.EndTime().Sub(w.StartTime()) != 1500*time.Millisecond {
		t.Errorf("budget.wait: parent %s, %v to %v; want the request's span, ending at %v after 1.5s", w.Parent().SpanID(), w.StartTime(), w.EndTime(), end)
	}
	if a := attrsOf(w); a["faxgate.wait.cause"].AsString() != "hold" || a["faxgate.result"].AsString() != "admitted" {
		t.Errorf("budget.wait attributes %v", a)
	}
	n := len(rec.Ended())
	off := NewUpstream(UpstreamOptions{})
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	allocs := testing.AllocsPerRun(100, func() {
		off.traceWait(ctx, end, time.Second, Outcome{Limit: "tenant"}, Admission{Allowed: true})
		u.traceWait(unsampled, end, time.Second, Outcome{Limit: "tenant"}, Admission{Allowed: true})
	})
	if allocs != 0 || len(rec.Ended()) != n {
		t.Errorf("with tracing off or unsampled: %v allocations, %d spans; want none", allocs, len(rec.Ended())-n)
	}
}

// The wait's cause and outcome come from what refused the request last and
// how the wait ended.
func TestTraceWaitCauseAndOutcome(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	u := NewUpstream(UpstreamOptions{Tracer: tp.Tracer("test")})
	ctx, req := tp.Tracer("test").Start(context.Background(), "POST contacts.list")
	for _, tc := range []struct {
		refusedBy      Outcome
		a              Admission
		cause, outcome string
	}{
		{Outcome{Throttled: true}, Admission{Allowed: true}, "hold", "admitted"},
		{Outcome{Limit: "tenant"}, Admission{Limit: "tenant"}, "budget", "refused"},
		{Outcome{}, Admission{Gone: true}, "queued", "caller_gone"},
	} {
		rec.Reset()
		u.traceWait(ctx, time.Now(), time.Second, tc.refusedBy, tc.a)
		spans := rec.Ended()
		if len(spans) != 1 {
			t.Fatalf("%d spans", len(spans))
		}
		a := attrsOf(spans[0])
		if a["faxgate.wait.cause"].AsString() != tc.cause || a["faxgate.result"].AsString() != tc.outcome {
			t.Errorf("%+v: attributes %v, want cause %s, result %s", tc, a, tc.cause, tc.outcome)
		}
	}
	req.End()
}
