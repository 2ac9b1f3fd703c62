package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// hangingExporter is a collector that never answers: every export lasts
// until its context ends.
type hangingExporter struct {
	exports  atomic.Int32
	once     sync.Once
	shutdown chan struct{} // closed when the processor shuts the exporter down
}

func (h *hangingExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	h.exports.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (h *hangingExporter) Shutdown(context.Context) error {
	h.once.Do(func() { close(h.shutdown) })
	return nil
}

// TestShutdownDropsWhatTheFlushDidNotSend: once Shutdown's wait is over,
// the export in flight is cancelled and what is still queued is dropped
// unsent, so the exporter stops at once. OpenTelemetry's batch processor
// alone returns from Shutdown but goes on exporting in the background, each
// batch for the whole export timeout.
func TestShutdownDropsWhatTheFlushDidNotSend(t *testing.T) {
	exp := &hangingExporter{shutdown: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(newBatcher(exp, zap.NewNop())))
	tr := tp.Tracer("test")
	// A batch and a half: the first batch is exported at once and hangs,
	// the other half waits in the queue.
	for range traceBatchSize * 3 / 2 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	eventually.Eventually(t, 5*time.Second, "the first export", func() bool { return exp.exports.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := tp.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want its deadline to end the flush", err)
	}
	// Without the stop, the exporter is shut down only after the hanging
	// export and the queued batch have each had the export timeout.
	eventually.Eventually(t, traceExportTimeout/2, "the exporter's shutdown", func() bool {
		select {
		case <-exp.shutdown:
			return true
		default:
			return false
		}
	})
	if n := exp.exports.Load(); n != 1 {
		t.Errorf("%d exports reached the collector, want 1: what is queued at shutdown is dropped", n)
	}
}
