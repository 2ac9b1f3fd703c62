// Package clocktest is a fake clock for tests: time moves only when the test
// advances it, so refresh and rate-limit behaviour is tested without sleeps.
package clocktest

import (
	"sync"
	"time"

	"github.com/faxgate/faxgate/internal/base/clock"
)

// Fake is a manually advanced clock. It satisfies clock.Clock.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	created chan struct{} // signalled whenever a timer is created
}

var _ clock.Clock = (*Fake)(nil)

// New returns a fake clock reading start.
func New(start time.Time) *Fake {
	return &Fake{now: start, created: make(chan struct{}, 1024)}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the clock is advanced past d.
func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	f.mu.Lock()
	t := &timer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	select {
	case f.created <- struct{}{}:
	default:
	}
	return t
}

// Advance moves the clock forward by d and fires every timer that is due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	keep := f.timers[:0]
	var fire []*timer
	for _, t := range f.timers {
		if !t.at.After(now) {
			fire = append(fire, t)
		} else {
			keep = append(keep, t)
		}
	}
	f.timers = keep
	f.mu.Unlock()
	for _, t := range fire {
		if t.fn != nil {
			t.fn() // as time.AfterFunc runs it: after the clock moved, outside its lock
			continue
		}
		t.c <- now
	}
}

// AfterFunc calls fn, on the goroutine that advances the clock, once the
// clock has been advanced past d; the timer can be stopped or reset like
// time.AfterFunc's.
func (f *Fake) AfterFunc(d time.Duration, fn func()) *FuncTimer {
	f.mu.Lock()
	t := &timer{f: f, at: f.now.Add(d), fn: fn}
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	return &FuncTimer{t}
}

// FuncTimer is a timer made by AfterFunc.
type FuncTimer struct{ t *timer }

// Stop keeps the timer from firing; it reports whether it was pending.
func (ft *FuncTimer) Stop() bool { return ft.t.Stop() }

// Reset makes the timer fire d after the clock's now; it reports whether it
// was pending.
func (ft *FuncTimer) Reset(d time.Duration) bool {
	pending := ft.t.Stop()
	f := ft.t.f
	f.mu.Lock()
	ft.t.at = f.now.Add(d)
	f.timers = append(f.timers, ft.t)
	f.mu.Unlock()
	return pending
}

// Pending is the number of timers waiting to fire.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NextDeadline returns when the earliest pending timer fires, and false when none is pending.
func (f *Fake) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var first time.Time
	for _, t := range f.timers {
		if first.IsZero() || t.at.Before(first) {
			first = t.at
		}
	}
	return first, !first.IsZero()
}

// WaitPending blocks until at least n timers are pending or the real-time
// limit passes, and reports whether they are. Tests use it to know that a
// background loop has gone to sleep before they advance the clock.
func (f *Fake) WaitPending(n int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		if f.Pending() >= n {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-f.created:
		case <-time.After(time.Millisecond):
		}
	}
}

type timer struct {
	f  *Fake
	at time.Time
	c  chan time.Time
	fn func() // set for AfterFunc's timers, which call it instead of sending on c
}

func (t *timer) C() <-chan time.Time { return t.c }

func (t *timer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, x := range t.f.timers {
		if x == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}
