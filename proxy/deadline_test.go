package proxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/clocktest"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

type ctxKey struct{}

func (d *deadlines) listed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for c := d.head; c != nil; c = c.next {
		n++
	}
	return n
}

func waitDone(t *testing.T, ctx context.Context, within time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(within):
		t.Fatalf("context not cancelled within %v", within)
	}
}

func TestDeadlinesCancelAtTheTimeout(t *testing.T) {
	clk := clocktest.New(time.Unix(1_000_000, 0))
	d := newDeadlines(150 * time.Millisecond)
	d.now = clk.Now
	d.afterFunc = func(w time.Duration, f func()) resetter { return clk.AfterFunc(w, f) }
	caller := context.WithValue(context.Background(), ctxKey{}, "v")
	var a, b, c upstreamCtx
	start := clk.Now()
	ca := d.begin(&a, caller)
	cb := d.begin(&b, caller)
	if dl, ok := ca.Deadline(); !ok || !dl.Equal(start.Add(150*time.Millisecond)) {
		t.Fatalf("Deadline() = %v, %v; want upstream.timeout from begin", dl, ok)
	}
	if ca.Value(ctxKey{}) != "v" || cb.Value(ctxKey{}) != "v" {
		t.Fatal("the context must carry the caller's values")
	}
	d.end(&b) // over before its deadline
	if context.Cause(cb) != context.Canceled {
		t.Fatalf("ended: cause %v, want Canceled", context.Cause(cb))
	}
	clk.Advance(50 * time.Millisecond)
	cc := d.begin(&c, caller) // begins 50ms later, so expires 50ms later
	clk.Advance(99 * time.Millisecond)
	if ca.Err() != nil {
		t.Fatal("cancelled before the 150ms timeout")
	}
	clk.Advance(time.Millisecond)
	waitDone(t, ca, 2*time.Second)
	if context.Cause(ca) != context.DeadlineExceeded {
		t.Fatalf("cause %v, want DeadlineExceeded", context.Cause(ca))
	}
	if cc.Err() != nil {
		t.Fatal("a later exchange was cancelled with the first")
	}
	clk.Advance(50 * time.Millisecond)
	waitDone(t, cc, 2*time.Second)
	if context.Cause(cc) != context.DeadlineExceeded {
		t.Fatalf("cause %v, want DeadlineExceeded", context.Cause(cc))
	}
	d.end(&a)
	d.end(&c)
	if n := d.listed(); n != 0 {
		t.Fatalf("%d exchanges still listed", n)
	}
}

func TestDeadlinesFollowTheCaller(t *testing.T) {
	d := newDeadlines(time.Minute)
	// A caller that leaves a young exchange, and one that leaves an exchange
	// already watched.
	for _, old := range []bool{false, true} {
		caller, leave := context.WithCancelCause(context.Background())
		var c upstreamCtx
		ctx := d.begin(&c, caller)
		// Something derived from it, as the transport derives its own.
		child, stop := context.WithCancel(ctx)
		if old {
			waitWatched(t, d, &c)
		}
		if ctx.Err() != nil {
			t.Fatal("cancelled while the caller is there")
		}
		gone := errors.New("caller gone")
		left := time.Now()
		leave(gone)
		waitDone(t, child, 5*time.Second)
		// Once watched, at most watchAfter+watchGap late; the bound leaves a
		// loaded machine a second, and tells it from upstream.timeout (a
		// minute).
		if took := time.Since(left); took > watchAfter+watchGap+time.Second {
			t.Errorf("watched before the caller left %v: noticed %v after the caller left", old, took)
		}
		if context.Cause(ctx) != gone {
			t.Errorf("watched before the caller left %v: cause %v, want the caller's", old, context.Cause(ctx))
		}
		stop()
		d.end(&c)
	}
	if n := d.listed(); n != 0 {
		t.Fatalf("%d exchanges still listed", n)
	}
}

func TestDeadlinesEndStopsTheWatch(t *testing.T) {
	d := newDeadlines(time.Minute)
	caller, leave := context.WithCancel(context.Background())
	var c upstreamCtx
	ctx := d.begin(&c, caller)
	waitWatched(t, d, &c)
	d.end(&c)
	if c.stopWatch != nil || c.listed {
		t.Fatal("end left the watch or the listing")
	}
	leave()
	if context.Cause(ctx) != context.Canceled {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}

// Exchanges begin and end concurrently in any order; the ones that outlive
// the timeout, and only those, are cancelled with DeadlineExceeded, and the
// list ends empty.
func TestDeadlinesConcurrent(t *testing.T) {
	const timeout = 60 * time.Millisecond
	d := newDeadlines(timeout)
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c upstreamCtx
			ctx := d.begin(&c, context.Background())
			if i%10 == 0 {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
					errs <- errors.New("a long exchange never timed out")
				}
				if context.Cause(ctx) != context.DeadlineExceeded {
					errs <- errors.New("a long exchange ended without DeadlineExceeded")
				}
			} else {
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond) // models an exchange a few ms long upstream
				if ctx.Err() != nil && time.Since(c.start) < timeout {
					errs <- errors.New("a short exchange was cancelled early")
				}
			}
			d.end(&c)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := d.listed(); n != 0 {
		t.Fatalf("%d exchanges still listed", n)
	}
}

// A caller gone before its exchange begins sends nothing upstream: the
// context is cancelled at once, not when the caller would be watched.
func TestDeadlinesCallerAlreadyGone(t *testing.T) {
	d := newDeadlines(time.Minute)
	caller, leave := context.WithCancelCause(context.Background())
	gone := errors.New("caller gone")
	leave(gone)
	var c upstreamCtx
	ctx := d.begin(&c, caller)
	if ctx.Err() == nil || context.Cause(ctx) != gone {
		t.Fatalf("err %v, cause %v: want cancelled with the caller's cause at once", ctx.Err(), context.Cause(ctx))
	}
	d.end(&c)
}

// Exchanges that outlive watchAfter one after another are watched in
// batches: the timer does not run once per exchange, but at most once per
// watchGap.
func TestDeadlinesWatchInBatches(t *testing.T) {
	d := newDeadlines(time.Minute)
	var mu sync.Mutex
	var fires []time.Time
	d.onFire = func() {
		mu.Lock()
		fires = append(fires, time.Now())
		mu.Unlock()
	}
	cs := make([]upstreamCtx, 40)
	for i := range cs {
		d.begin(&cs[i], context.Background())
		time.Sleep(time.Millisecond) // paces the exchanges: one begins each millisecond
	}
	for i := range cs {
		waitWatched(t, d, &cs[i])
	}
	for i := range cs {
		d.end(&cs[i])
	}
	// Without the gap the timer runs once per exchange, a millisecond
	// apart. With it, each run arms the next at least watchGap later (a
	// slow machine only spaces them more); 100µs for the clock readings.
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(fires); i++ {
		if gap := fires[i].Sub(fires[i-1]); gap < watchGap-100*time.Microsecond {
			t.Fatalf("timer runs %d and %d were %v apart, want at least watchGap (%v); %d runs for %d exchanges",
				i, i+1, gap, watchGap, len(fires), len(cs))
		}
	}
	t.Logf("%d timer runs for %d exchanges begun over %v", len(fires), len(cs), cs[len(cs)-1].start.Sub(cs[0].start))
}

// waitWatched waits until c's caller is watched.
func waitWatched(t *testing.T, d *deadlines, c *upstreamCtx) {
	t.Helper()
	eventually.Eventually(t, 5*time.Second, "the caller of an old exchange watched", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return c.stopWatch != nil
	})
}
