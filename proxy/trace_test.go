package proxy

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/faxgate/faxgate/policy/limit"
)

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// The wait recorded after the fact: its span spans the wait, under the
// request's; no wait, tracing off or an unsampled request record nothing.
func TestRecordBudgetWait(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	h := &Handler{tracer: tp.Tracer("test")}
	ctx, req := tp.Tracer("test").Start(context.Background(), "POST contacts.list")
	end := time.Now()
	h.recordBudgetWait(ctx, end, 1500*time.Millisecond, "hold", "", "admitted")
	h.recordBudgetWait(ctx, end, 0, "budget", "tenant", "admitted") // no wait: no span
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
	off := &Handler{}
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	allocs := testing.AllocsPerRun(100, func() {
		off.recordBudgetWait(ctx, end, time.Second, "budget", "tenant", "admitted")
		h.recordBudgetWait(unsampled, end, time.Second, "budget", "tenant", "admitted")
	})
	if allocs != 0 || len(rec.Ended()) != n {
		t.Errorf("with tracing off or unsampled: %v allocations, %d spans; want none", allocs, len(rec.Ended())-n)
	}
}

// The wait's cause and outcome come from what refused the request last and
// how the wait ended.
func TestTraceBudgetWaitCauseAndOutcome(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	h := &Handler{tracer: tp.Tracer("test")}
	ctx, req := tp.Tracer("test").Start(context.Background(), "POST contacts.list")
	for _, tc := range []struct {
		refusedBy, out limit.Outcome
		gone           bool
		cause, outcome string
	}{
		{limit.Outcome{Throttled: true}, limit.Outcome{Allowed: true}, false, "hold", "admitted"},
		{limit.Outcome{Limit: "tenant"}, limit.Outcome{Limit: "tenant"}, false, "budget", "refused"},
		{limit.Outcome{}, limit.Outcome{}, true, "queued", "caller_gone"},
	} {
		rec.Reset()
		h.traceBudgetWait(ctx, time.Second, tc.refusedBy, tc.out, tc.gone)
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
