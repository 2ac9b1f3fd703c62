package background

import (
	"context"
	"errors"
	"maps"
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
	Loop(ctx, zap.New(core), nil, "test", func(context.Context) bool { pauses.Add(1); return true }, func(context.Context) {
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
	Loop(context.Background(), zap.New(core), nil, "test", func(context.Context) bool { return true }, func(context.Context) {
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
	Loop(ctx, zap.NewNop(), nil, "test", func(context.Context) bool { cancel(); return false }, func(context.Context) {
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
	var counted []string // Loop's calls to count are sequential
	count := func(loop string) { counted = append(counted, loop) }
	Loop(context.Background(), zap.New(core), count, "test", func(context.Context) bool { panic("broken clock") }, func(context.Context) {
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
	if len(counted) != 2 || counted[0] != "test" || counted[1] != "test" {
		t.Errorf("counted %q, want the loop's name twice (body and pause)", counted)
	}
}

// TestPanicsAreCounted: every recovered panic is counted under its loop's
// name, in Loop and in Guard alike, and nothing else is.
func TestPanicsAreCounted(t *testing.T) {
	counts := map[string]int{}
	count := func(loop string) { counts[loop]++ }
	var n atomic.Int32
	Loop(context.Background(), zap.NewNop(), count, "key_watch", func(context.Context) bool { return true }, func(context.Context) {
		if n.Add(1) <= 2 {
			panic("twice")
		}
	})
	func() {
		defer Guard(zap.NewNop(), count, "token_lease", "", nil)
		panic("once")
	}()
	func() {
		defer Guard(zap.NewNop(), count, "token_updates", "", nil)
	}()
	if want := map[string]int{"key_watch": 2, "token_lease": 1}; !maps.Equal(counts, want) {
		t.Fatalf("counted %v, want %v", counts, want)
	}
}

func TestGuardWithoutPanic(t *testing.T) {
	panicked := false
	func() {
		defer Guard(zap.NewNop(), nil, "test", "", &panicked)
	}()
	if panicked {
		t.Fatal("reported a panic that did not happen")
	}
}
