package redisconn

import (
	"testing"
	"time"
)

// TestTakeView: a view with an older configuration epoch than the one
// recorded is left out (a sentinel that has not heard of the failover),
// unless older views alone come for olderViewsFor (sentinels started
// afresh); a view as new or newer is always taken.
func TestTakeView(t *testing.T) {
	c := &Conn{}
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for i, step := range []struct {
		epoch int64
		at    time.Duration
		take  bool
	}{
		{0, 0, true},
		{3, time.Second, true},      // a failover
		{2, 2 * time.Second, false}, // a sentinel behind
		{3, 3 * time.Second, true},
		{0, 4 * time.Second, false}, // sentinels started afresh...
		{0, 4*time.Second + olderViewsFor - time.Millisecond, false},
		{0, 4*time.Second + olderViewsFor, true}, // ...taken once they stay so
		{1, 5*time.Second + olderViewsFor, true},
	} {
		if got := c.takeView(step.epoch, t0.Add(step.at)); got != step.take {
			t.Errorf("step %d: epoch %d at %v: take = %v, want %v", i, step.epoch, step.at, got, step.take)
		}
	}
}

// TestResolve: addresses become the peers a connection to them has; a
// name that does not resolve makes the whole set unusable, so that nothing
// is closed on its account.
func TestResolve(t *testing.T) {
	peers, ok := resolve([]string{"10.0.0.7:6379", "localhost:6380"})
	if !ok || !peers["10.0.0.7:6379"] || !peers["127.0.0.1:6380"] {
		t.Errorf("resolve = %v, %v; want the IP as given and localhost's address", peers, ok)
	}
	if _, ok := resolve([]string{"10.0.0.7:6379", "no-such-host.invalid:6379"}); ok {
		t.Error("a name that does not resolve gave a usable set")
	}
}
