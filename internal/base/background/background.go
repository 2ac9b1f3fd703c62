// Package background keeps faxgate's long-lived goroutines alive. An
// unrecovered panic in any goroutine ends the whole process, and a panic
// recovered silently leaves a loop stopped with nobody told; so a panic in a
// loop is recovered, logged with its stack, counted, and the loop carries on.
package background

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"go.uber.org/zap"
)

// Msg is the message of every panic log line, so one alert rule or one grep
// finds them all; the loop field says which loop it was.
const Msg = "background loop panicked"

// Counter counts a recovered panic of the named loop: the gateway's
// faxgate_background_panics_total{loop} (docs/metrics-and-alerts.md). It is
// handed in by whoever runs the loop; nil counts nothing.
type Counter func(loop string)

// fallbackPause spaces restarts when the loop's own pause panics too (a
// broken clock): a loop that can do nothing else logs once a second instead
// of spinning.
const fallbackPause = time.Second

// Guard, deferred directly (defer background.Guard(...)), recovers a panic in
// the calling function, logs it, counts it with count and sets *panicked, so
// the caller can treat the interrupted step as failed and go on. then says
// what happens next, for the operator reading the line.
func Guard(log *zap.Logger, count Counter, loop, then string, panicked *bool) {
	if v := recover(); v != nil {
		if count != nil {
			count(loop)
		}
		logPanic(log, loop, then, v)
		if panicked != nil {
			*panicked = true
		}
	}
}

// Loop calls body until body returns normally or ctx ends. When body panics,
// the panic is logged and counted with count, pause is called (it waits, normally on the loop's
// injected clock, and returns false once ctx ended) and body runs again.
func Loop(ctx context.Context, log *zap.Logger, count Counter, loop string, pause func(context.Context) bool, body func(context.Context)) {
	for ctx.Err() == nil {
		panicked := false
		func() {
			defer Guard(log, count, loop, "restarting the loop", &panicked)
			body(ctx)
		}()
		if !panicked {
			return
		}
		if !safePause(ctx, log, count, loop, pause) {
			return
		}
	}
}

func safePause(ctx context.Context, log *zap.Logger, count Counter, loop string, pause func(context.Context) bool) (goOn bool) {
	panicked := false
	func() {
		defer Guard(log, count, loop, "pausing on the wall clock instead", &panicked)
		goOn = pause(ctx)
	}()
	if !panicked {
		return goOn
	}
	t := time.NewTimer(fallbackPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// logPanic writes the panic line. The panic value is logged only when it is
// a runtime.Error (nil dereference, index out of range ...), whose text the
// runtime writes; any other value is named by its type alone, because a
// panic(fmt.Sprintf(...)) may carry a token or a key. The stack holds
// function names, files and lines, and arguments only as raw words.
func logPanic(log *zap.Logger, loop, then string, v any) {
	if log == nil {
		return
	}
	desc := fmt.Sprintf("value of type %T", v)
	if re, ok := v.(runtime.Error); ok {
		desc = re.Error()
	}
	log.Error(Msg, zap.String("loop", loop), zap.String("panic", desc), zap.String("then", then),
		zap.ByteString("stack", debug.Stack()))
}
