// Package eventually is the one way tests wait: for an event (Eventually), or
// for the absence of one over a window (Never). Both poll a condition, never
// sleep for a fixed time to let something happen, and fail with what was
// awaited and the condition's last word, so a slow machine only makes a test
// slower, not wrong.
package eventually

import (
	"fmt"
	"testing"
	"time"
)

// Poll is how often a condition is asked again. Short, so a test waits for
// its event hardly longer than the event takes.
const Poll = 5 * time.Millisecond

// Eventually waits until cond returns true, asking every Poll, and fails the
// test when limit passes first. what names the awaited event.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyErr(t, limit, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// EventuallyErr waits until cond returns nil, asking every Poll, and fails
// the test with cond's last error when limit passes first.
func EventuallyErr(t testing.TB, limit time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Wait(limit, cond); err != nil {
		t.Fatalf("%s: not within %s: %v", what, limit, err)
	}
}

// Wait is Eventually for code that reports instead of failing a test (test
// support outside a test's goroutine, a probe that retries): it returns nil
// once cond does, or cond's last error when limit passes first.
func Wait(limit time.Duration, cond func() error) error {
	deadline := time.Now().Add(limit)
	interval := Poll
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		// Polling backs off to at most 100 ms, so a long wait on a child
		// process does not spin.
		time.Sleep(min(interval, time.Until(deadline)+time.Millisecond))
		interval = min(interval*2, 100*time.Millisecond)
	}
}

// Never asks cond every Poll for the whole window and fails the test the
// first time it returns true: what names the event that must not happen.
// It is for a promise that something stays absent (no second renewal, no
// request upstream); the window is the claim the test makes, and a test
// that can wait for a later event instead should do that.
func Never(t testing.TB, window time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		if cond() {
			t.Fatalf("%s happened (watched for %s)", what, window)
			return
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(min(Poll, time.Until(deadline)+time.Millisecond))
	}
}

var errNotYet = fmt.Errorf("condition still false")
