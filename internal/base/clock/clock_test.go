package clock

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), Real{}, time.Millisecond) {
		t.Fatal("a whole wait reported as cut short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, Real{}, time.Hour) {
		t.Fatal("a wait cut short by its context reported as whole")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("an ended context still waited %v", d)
	}
}
