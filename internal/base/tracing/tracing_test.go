package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
)

func TestParseTraceparent(t *testing.T) {
	const id = "0af7651916cd43dd8448eb211c80319c"
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"00-" + id + "-b7ad6b7169203331-01", true},
		{"00-" + id + "-b7ad6b7169203331-00", true},
		// A later version may carry more after the flags.
		{"01-" + id + "-b7ad6b7169203331-01-extra", true},
		{"00-" + id + "-b7ad6b7169203331-01-extra", false}, // version 00 is exactly 55 bytes
		{"ff-" + id + "-b7ad6b7169203331-01", false},       // version ff is invalid
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", false},
		{"00-" + id + "-0000000000000000-01", false},
		{"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", false}, // upper case
		{"00-" + id + "-b7ad6b7169203331-0g", false},
		{"00-" + id + "_b7ad6b7169203331-01", false},
		{"00-" + id[:31] + "-b7ad6b7169203331-01", false},
		{"", false},
	} {
		got, ok := ParseTraceparent(c.in)
		if ok != c.ok {
			t.Errorf("ParseTraceparent(%q) ok = %v, want %v", c.in, ok, c.ok)
		}
		if ok && got.String() != id {
			t.Errorf("ParseTraceparent(%q) = %s, want %s", c.in, got, id)
		}
	}
}

// Tracing off (nil tracer) and an unsampled request cost no allocation.
func TestChildFreeWhenOff(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, sp := Child(ctx, nil, "x")
		sp.End()
		_ = c
		if _, ok := ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"); !ok {
			t.Fatal("not parsed")
		}
	})
	if allocs != 0 {
		t.Errorf("Child with tracing off allocates %v times", allocs)
	}
	if _, sp := Child(ctx, noop.NewTracerProvider().Tracer("t"), "x"); sp.IsRecording() {
		t.Errorf("Child of a context without a recording span records")
	}
}
