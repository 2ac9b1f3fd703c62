package proxy

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// deadlineLog records the read deadlines a body sets.
type deadlineLog struct{ set []time.Time }

func (d *deadlineLog) SetReadDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// TestBodyDeadlineMovesRarely: a body read in many quick reads moves the
// connection's deadline once, not once per read, and every read still has
// the whole read timeout before it; the end of the body clears it.
func TestBodyDeadlineMovesRarely(t *testing.T) {
	const timeout = time.Minute // far above how long the reads below take
	log := &deadlineLog{}
	b := &requestBody{rc: io.NopCloser(bytes.NewReader(make([]byte, 1<<20))), ctl: log, timeout: timeout, limit: 2 << 20}
	buf := make([]byte, 32<<10)
	reads := 0
	for {
		before := time.Now()
		_, err := b.Read(buf)
		reads++
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if last := log.set[len(log.set)-1]; last.Before(before.Add(timeout)) {
			t.Fatalf("read %d may time out %v after it began, before the read timeout", reads, last.Sub(before))
		}
	}
	if len(log.set) != 2 || !log.set[1].IsZero() {
		t.Fatalf("%d reads set the deadline %d times (%v), want once and a clear", reads, len(log.set), log.set)
	}
	if late := time.Until(log.set[0]); late > timeout+timeout/8 {
		t.Errorf("deadline %v away, more than 1⅛ read timeouts", late)
	}
}

// TestBodyDeadlineKeepsTheHardBound: a hard deadline nearer than the read
// timeout is the deadline, set once however many reads follow.
func TestBodyDeadlineKeepsTheHardBound(t *testing.T) {
	log := &deadlineLog{}
	hard := time.Now().Add(time.Minute)
	b := &requestBody{rc: io.NopCloser(bytes.NewReader(make([]byte, 100<<10))), ctl: log, timeout: time.Hour, limit: 1 << 20, hardDeadline: hard}
	if _, err := io.ReadAll(io.LimitReader(b, 99<<10)); err != nil {
		t.Fatal(err)
	}
	if len(log.set) != 1 || !log.set[0].Equal(hard) {
		t.Fatalf("deadlines %v, want the hard deadline %v once", log.set, hard)
	}
}
