package e2e_test

import (
	"sync"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/clock"
)

// jumpClock is the real clock that a test can move forward at once. Its
// timers fire in real time, so a gateway under it waits, polls and burns
// CPU as it does under the real clock; Jump fires at once the timers whose
// time it reaches. A renewal due in a day, or the end of a hold the test is
// done measuring, then comes when the test says, on every replica that
// shares the clock. Redis and faxsim keep real time: a jump moves only the
// gateways' view (token lifetimes, holds, waits, local windows).
type jumpClock struct {
	mu     sync.Mutex
	offset time.Duration
	timers map[*jumpTimer]struct{}
}

var _ clock.Clock = (*jumpClock)(nil)

func newJumpClock() *jumpClock { return &jumpClock{timers: map[*jumpTimer]struct{}{}} }

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *jumpClock) NewTimer(d time.Duration) clock.Timer {
	t := &jumpTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	t.at = time.Now().Add(c.offset + d)
	c.timers[t] = struct{}{}
	c.mu.Unlock()
	t.real = time.AfterFunc(d, t.fire)
	return t
}

// Jump moves the clock d forward and fires the timers now due.
func (c *jumpClock) Jump(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	now := time.Now().Add(c.offset)
	var due []*jumpTimer
	for t := range c.timers {
		if !t.at.After(now) {
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		t.fire()
	}
}

// JumpTo moves the clock forward to at (not back).
func (c *jumpClock) JumpTo(at time.Time) {
	if d := at.Sub(c.Now()); d > 0 {
		c.Jump(d)
	}
}

type jumpTimer struct {
	c    *jumpClock
	at   time.Time
	ch   chan time.Time
	real *time.Timer
}

func (t *jumpTimer) C() <-chan time.Time { return t.ch }

// fire delivers once, whether the real timer or a jump comes first.
func (t *jumpTimer) fire() {
	t.c.mu.Lock()
	_, pending := t.c.timers[t]
	delete(t.c.timers, t)
	now := time.Now().Add(t.c.offset)
	t.c.mu.Unlock()
	if pending {
		t.ch <- now
	}
}

func (t *jumpTimer) Stop() bool {
	t.c.mu.Lock()
	_, pending := t.c.timers[t]
	delete(t.c.timers, t)
	t.c.mu.Unlock()
	t.real.Stop()
	return pending
}

func TestJumpClock(t *testing.T) {
	c := newJumpClock()
	start := c.Now()
	long, short, stopped := c.NewTimer(time.Hour), c.NewTimer(10*time.Millisecond), c.NewTimer(time.Hour)
	// A timer fires in real time.
	select {
	case <-short.C():
	case <-time.After(5 * time.Second):
		t.Fatal("a 10 ms timer did not fire in real time")
	}
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop reports a pending timer true once, then false")
	}
	c.Jump(time.Hour)
	if d := c.Now().Sub(start); d < time.Hour {
		t.Fatalf("after a jump of an hour the clock moved %v", d)
	}
	// A jump fires what it reaches before it returns, and nothing stopped.
	select {
	case <-long.C():
	default:
		t.Fatal("the hour's timer had not fired when the jump of an hour returned")
	}
	if len(stopped.C()) != 0 {
		t.Fatal("a stopped timer fired")
	}
	if long.Stop() {
		t.Fatal("Stop of a fired timer reported it pending")
	}
}
