package eventually

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that notes a failure instead of ending the test.
type recorder struct {
	testing.TB
	failed atomic.Bool
	msg    string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed.Store(true)
	r.msg = format
}

func TestEventuallyReturnsOnTheEvent(t *testing.T) {
	var n atomic.Int32
	r := &recorder{TB: t}
	Eventually(r, 5*time.Second, "three asks", func() bool { return n.Add(1) == 3 })
	if r.failed.Load() || n.Load() != 3 {
		t.Fatalf("failed=%v after %d asks, want success after 3", r.failed.Load(), n.Load())
	}
}

func TestEventuallyFailsWhenTheLimitPasses(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	Eventually(r, 50*time.Millisecond, "never true", func() bool { return false })
	if !r.failed.Load() {
		t.Fatal("a condition that never held passed")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before its limit", d)
	}
}

func TestWaitReturnsTheLastError(t *testing.T) {
	want := errors.New("still down")
	if err := Wait(20*time.Millisecond, func() error { return want }); err != want {
		t.Fatalf("Wait = %v, want %v", err, want)
	}
	if err := Wait(time.Second, func() error { return nil }); err != nil {
		t.Fatalf("Wait = %v on a condition that held", err)
	}
}

func TestNever(t *testing.T) {
	r := &recorder{TB: t}
	Never(r, 30*time.Millisecond, "nothing", func() bool { return false })
	if r.failed.Load() {
		t.Fatal("Never failed on a condition that stayed false")
	}
	var n atomic.Int32
	Never(r, 5*time.Second, "the third ask", func() bool { return n.Add(1) >= 3 })
	if !r.failed.Load() {
		t.Fatal("Never passed on a condition that became true")
	}
	if n.Load() != 3 {
		t.Fatalf("Never asked %d times, want it to stop at the first true (3)", n.Load())
	}
}
