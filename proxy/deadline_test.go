package proxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	d := newDeadlines(150 * time.Millisecond)
	caller := context.WithValue(context.Background(), ctxKey{}, "v")
	var a, b, c upstreamCtx
	start := time.Now()
	ca := d.begin(&a, caller)
	cb := d.begin(&b, caller)
	if dl, ok := ca.Deadline(); !ok || dl.Before(start.Add(150*time.Millisecond)) || dl.After(time.Now().Add(150*time.Millisecond)) {
		t.Fatalf("Deadline() = %v, %v; want upstream.timeout from begin", dl, ok)
	}
	if ca.Value(ctxKey{}) != "v" || cb.Value(ctxKey{}) != "v" {
		t.Fatal("the context must carry the caller's values")
	}
	d.end(&b) // over before its deadline
	if context.Cause(cb) != context.Canceled {
		t.Fatalf("ended: cause %v, want Canceled", context.Cause(cb))
	}
	time.Sleep(50 * time.Millisecond)
	cc := d.begin(&c, caller) // begins 50ms later, so expires 50ms later
	waitDone(t, ca, 2*time.Second)
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("cancelled after %v, before the 150ms timeout", took)
	}
	if context.Cause(ca) != context.DeadlineExceeded {
		t.Fatalf("cause %v, want DeadlineExceeded", context.Cause(ca))
	}
	if cc.Err() != nil {
		t.Fatal("a later exchange was cancelled with the first")
	}
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
	for _, age := range []time.Duration{0, 5 * watchAfter} {
		caller, leave := context.WithCancelCause(context.Background())
		var c upstreamCtx
		ctx := d.begin(&c, caller)
		// Something derived from it, as the transport derives its own.
		child, stop := context.WithCancel(ctx)
		time.Sleep(age)
		if ctx.Err() != nil {
			t.Fatal("cancelled while the caller is there")
		}
		gone := errors.New("caller gone")
		left := time.Now()
		leave(gone)
		waitDone(t, child, 2*time.Second)
		if took := time.Since(left); took > watchAfter+500*time.Millisecond {
			t.Errorf("age %v: noticed %v after the caller left", age, took)
		}
		if context.Cause(ctx) != gone {
			t.Errorf("age %v: cause %v, want the caller's", age, context.Cause(ctx))
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
	deadline := time.Now().Add(2 * time.Second)
	for {
		d.mu.Lock()
		watched := c.stopWatch != nil
		d.mu.Unlock()
		if watched {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the caller of an old exchange is never watched")
		}
		time.Sleep(time.Millisecond)
	}
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
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
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
// batches: the timer does not run once per exchange.
func TestDeadlinesWatchInBatches(t *testing.T) {
	d := newDeadlines(time.Minute)
	var fires atomic.Int64
	d.onFire = func() { fires.Add(1) }
	cs := make([]upstreamCtx, 40)
	for i := range cs {
		d.begin(&cs[i], context.Background())
		time.Sleep(time.Millisecond)
	}
	time.Sleep(watchAfter + 3*watchGap)
	for i := range cs {
		d.mu.Lock()
		watched := cs[i].stopWatch != nil
		d.mu.Unlock()
		if !watched {
			t.Fatalf("exchange %d is not watched", i)
		}
		d.end(&cs[i])
	}
	// 40 exchanges begun over about 40+ ms: without the gap, one run each.
	if n := fires.Load(); n > 25 {
		t.Fatalf("the timer ran %d times for 40 exchanges", n)
	}
}
