package tokencache

import "time"

// Clock is the time source the manager schedules renewals with; tests inject
// a fake one and advance it instead of sleeping.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer firing once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the manager uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
