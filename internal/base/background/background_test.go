package background

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestLoopRestartsAfterAPanic(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var calls, pauses atomic.Int32
	ctx := context.Background()
	Loop(ctx, zap.New(core), "test", func(context.Context) bool { pauses.Add(1); return true }, func(context.Context) {
		if calls.Add(1) == 1 {
			panic(errors.New("sk_secret_in_panic_value"))
		}
	})
	if calls.Load() != 2 || pauses.Load() != 1 {
		t.Fatalf("body ran %d times with %d pauses; want 2 and 1", calls.Load(), pauses.Load())
	}
	got := logs.FilterMessage(Msg).All()
	if len(got) != 1 {
		t.Fatalf("%d panic lines, want 1", len(got))
	}
	f := got[0].ContextMap()
	if f["loop"] != "test" || f["panic"] != "value of type *errors.errorString" {
		t.Errorf("fields %v", f)
	}
	if !strings.Contains(f["stack"].(string), "TestLoopRestartsAfterAPanic") {
		t.Errorf("stack does not reach the panicking function:\n%s", f["stack"])
	}
	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, "sk_secret") {
				t.Errorf("panic value logged: %v", e.ContextMap())
			}
		}
	}
}

func TestLoopLogsRuntimeErrors(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var n atomic.Int32
	Loop(context.Background(), zap.New(core), "test", func(context.Context) bool { return true }, func(context.Context) {
		if k := n.Add(1); k == 1 {
			_ = 1 / (k - 1) // integer divide by zero: a runtime.Error
		}
	})
	got := logs.FilterMessage(Msg).All()
	if len(got) != 1 || !strings.Contains(got[0].ContextMap()["panic"].(string), "divide by zero") {
		t.Fatalf("logged %v", got)
	}
}

func TestLoopStopsWhenPauseSeesContextEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	Loop(ctx, zap.NewNop(), "test", func(context.Context) bool { cancel(); return false }, func(context.Context) {
		n.Add(1)
		panic("always")
	})
	if n.Load() != 1 {
		t.Fatalf("body ran %d times after the context ended, want 1", n.Load())
	}
}

func TestLoopSurvivesAPanickingPause(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var n atomic.Int32
	start := time.Now()
	Loop(context.Background(), zap.New(core), "test", func(context.Context) bool { panic("broken clock") }, func(context.Context) {
		if n.Add(1) == 1 {
			panic("once")
		}
	})
	if n.Load() != 2 {
		t.Fatalf("body ran %d times, want 2", n.Load())
	}
	if d := time.Since(start); d < fallbackPause {
		t.Errorf("restarted after %v, want the %v wall-clock fallback", d, fallbackPause)
	}
	if got := len(logs.FilterMessage(Msg).All()); got != 2 {
		t.Errorf("%d panic lines, want 2 (body and pause)", got)
	}
}

func TestGuardWithoutPanic(t *testing.T) {
	panicked := false
	func() {
		defer Guard(zap.NewNop(), "test", "", &panicked)
	}()
	if panicked {
		t.Fatal("reported a panic that did not happen")
	}
}
