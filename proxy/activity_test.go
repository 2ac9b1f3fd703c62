package proxy

import (
	"sync"
	"testing"
	"time"
)

// The ring counts answers of the last 5 minutes: a step older than the
// window drops out, a lap of the ring restarts a slot instead of adding to
// it, and denials and the last rate-limit refusal are kept apart.
func TestActivityWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0).Truncate(ActivityStep)
	a := new(callerActivity)
	a.record(t0, false, false)
	a.record(t0.Add(time.Second), true, false)
	a.record(t0.Add(2*time.Second), true, true)

	got := a.snapshot(t0.Add(3 * time.Second))
	if got.Requests != 3 || got.Denials != 2 || !got.LimitedNow {
		t.Errorf("at once: %+v, want 3 requests, 2 denials, limited now", got)
	}
	if got := a.snapshot(t0.Add(20 * time.Second)); got.LimitedNow || got.Requests != 3 {
		t.Errorf("20 s later: %+v, want the 3 requests still counted and no longer limited now", got)
	}
	if got := a.snapshot(t0.Add(ActivityWindow - time.Second)); got.Requests != 3 {
		t.Errorf("just inside the window: %d requests, want 3", got.Requests)
	}
	if got := a.snapshot(t0.Add(ActivityWindow)); got.Requests != 0 || got.Denials != 0 {
		t.Errorf("a window later: %+v, want nothing counted", got)
	}
	if got := a.snapshot(t0.Add(ActivityWindow)); got.LastLimited.IsZero() {
		t.Error("the last rate-limit refusal was forgotten")
	}

	// One lap later the same slot starts over rather than adding to the
	// step that was there.
	a.record(t0.Add(ActivityWindow), false, false)
	if got := a.snapshot(t0.Add(ActivityWindow)); got.Requests != 1 || got.Denials != 0 {
		t.Errorf("after a lap: %+v, want 1 request, 0 denials", got)
	}
}

// Concurrent answers are all counted (no lost update on the slot's
// compare-and-swap), also across a step boundary.
func TestActivityConcurrentCount(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0).Truncate(ActivityStep)
	a := new(callerActivity)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				a.record(t0.Add(time.Duration(g*1000+i)*time.Millisecond), i%2 == 0, false)
			}
		}()
	}
	wg.Wait()
	got := a.snapshot(t0.Add(8 * time.Second))
	if got.Requests != 8000 || got.Denials != 4000 {
		t.Errorf("%+v, want 8000 requests and 4000 denials", got)
	}
}

// A reload keeps the ring of a caller that keeps its name, drops a removed
// caller's and starts a new caller's empty; unidentified always has one.
func TestActivityTableCarriesOver(t *testing.T) {
	now := time.Now()
	first := newActivityTable([]string{"a", "b"}, nil)
	first.of("a").record(now, false, false)
	first.of("unidentified").record(now, true, false)
	second := newActivityTable([]string{"a", "c"}, first)
	if second.of("a") != first.of("a") || second.of("unidentified") != first.of("unidentified") {
		t.Error("a kept caller's ring was not carried over")
	}
	if second.of("b") != nil || second.of("c") == nil || second.of("c") == first.of("b") {
		t.Error("removed and added callers are not as expected")
	}
	if got := second.names; len(got) != 3 || got[0] != "a" || got[1] != "c" || got[2] != "unidentified" {
		t.Errorf("names %v, want [a c unidentified]", got)
	}
	var nilRing *callerActivity
	nilRing.record(now, true, true) // a caller outside the rules counts nothing, and does not panic
}

// BenchmarkActivityRecord is what the status page's counts add to a
// request: one record, from every core at once on one caller's ring (the
// worst case: all requests contend on the same slot).
func BenchmarkActivityRecord(b *testing.B) {
	a := new(callerActivity)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := time.Now()
		for pb.Next() {
			a.record(now, false, false)
		}
	})
}
