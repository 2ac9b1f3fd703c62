// Package clock is the process's time source, injected wherever time
// schedules work (token renewal, rate limits, certificate polling), so that
// tests advance a fake clock instead of sleeping.
package clock

import (
	"context"
	"time"
)

// Clock is a time source; tests inject a fake one (internal/testing/clocktest)
// and advance it instead of sleeping.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer firing once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer a Clock user needs.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Sleep waits d on c, or less when ctx ends first; it reports whether the
// whole wait happened.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
