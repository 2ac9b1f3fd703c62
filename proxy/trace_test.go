package proxy

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

// The budget-wait span (docs/tracing.md) that the waiting code wraps a wait
// in: a child of the request's span with its cause, limit and outcome; and
// nothing at all with tracing off or for an unsampled request.
func TestBudgetWaitSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	h := &Handler{tracer: tp.Tracer("test")}

	ctx, req := tp.Tracer("test").Start(context.Background(), "POST contacts.list")
	wctx, bw := h.startBudgetWait(ctx, "budget", "per-route")
	if got := trace.SpanFromContext(wctx).SpanContext(); got.SpanID() == req.SpanContext().SpanID() {
		t.Fatalf("the wait's context carries the request's span, not the wait's")
	}
	bw.end("admitted")
	// A hold: no limit attribute.
	_, hw := h.startBudgetWait(ctx, "hold", "")
	hw.end("caller_gone")
	req.End()
	var wait sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "budget.wait" && wait == nil {
			wait = s
		}
	}
	if wait == nil {
		t.Fatalf("no budget.wait span among %d", len(rec.Ended()))
	}
	if wait.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Errorf("budget.wait's parent is %s, want the request's span", wait.Parent().SpanID())
	}
	a := attrsOf(wait)
	if a["faxgate.wait.cause"].AsString() != "budget" || a["faxgate.limit"].AsString() != "per-route" ||
		a["faxgate.result"].AsString() != "admitted" || a["faxgate.wait.seconds"].Type() != attribute.FLOAT64 {
		t.Errorf("budget.wait attributes %v", a)
	}

	last := rec.Ended()[1]
	if a := attrsOf(last); a["faxgate.wait.cause"].AsString() != "hold" || a["faxgate.result"].AsString() != "caller_gone" {
		t.Errorf("hold wait attributes %v", a)
	}
	if _, ok := attrsOf(last)["faxgate.limit"]; ok {
		t.Errorf("a hold's wait names a limit")
	}

	// Tracing off, and a request that is not sampled: no span, no cost.
	n := len(rec.Ended())
	off := &Handler{}
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	allocs := testing.AllocsPerRun(100, func() {
		_, w := off.startBudgetWait(ctx, "budget", "per-route")
		w.end("admitted")
		_, w = h.startBudgetWait(unsampled, "budget", "per-route")
		w.end("admitted")
	})
	if allocs != 0 {
		t.Errorf("a wait costs %v allocations with tracing off or unsampled, want 0", allocs)
	}
	if len(rec.Ended()) != n {
		t.Errorf("spans were recorded with tracing off or for an unsampled request")
	}
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
