package limit

// The fair waiting room: max_waiting places per replica, shared so that no
// one caller's waiters keep the others out
// (docs/upstream-budget.md#waiting-instead-of-refusing).

import "time"

// room makes a place for a request of caller among the maxWaiting waiters
// of this replica: there is one free, or caller has fewer waiters than the
// caller with the most, whose newest waiter then gives its place up and
// gets its 429 at once. So one caller queued on its own cap or share never
// keeps other callers from waiting (docs/upstream-budget.md#waiting-instead-of-refusing).
func (l *Waitlist) room(caller string, maxWaiting int, now time.Time) bool {
	if l.n < maxWaiting {
		return true
	}
	big, most := "", 0
	for c, n := range l.byCaller {
		if n > most || n == most && c < big {
			big, most = c, n
		}
	}
	if l.byCaller[caller] >= most {
		return false
	}
	var newest *waiter
	for _, q := range l.queues {
		for _, w := range q.ws {
			if w.caller == big && !w.trying && (newest == nil || w.seq > newest.seq) {
				newest = w
			}
		}
	}
	if newest == nil {
		return false // every one of them is asking right now
	}
	q := newest.q
	out := q.last
	next := q.ws[0].at
	if q.ws[0] == newest {
		next = newest.at
	}
	out.RetryAfter = max(next.Sub(now), time.Millisecond)
	newest.final = &out
	l.remove(newest, newest.at)
	signal(newest)
	if l.evicted != nil {
		l.evicted.Inc()
	}
	return l.n < maxWaiting
}
