package limit

// The queues a waiting request counts in (wait.go): its route's hold, then
// each budget window's shared pool and its caller's own cap there. A key
// names one queue of the Waitlist.

import "time"

// HoldKey is the queue of the requests waiting for route's hold to end.
func HoldKey(route string) string { return "hold\x00" + route }

// WaitKey is the queue a request refused with d waits in: the refusing
// window's pool, or caller's own cap there.
func (d BudgetDecision) WaitKey(caller string) string {
	if d.Capped {
		return "cap\x00" + d.Limit + "\x00" + d.Window + "\x00" + caller
	}
	return PoolKey(d.Limit, d.Window)
}

// PoolKey is the queue of the requests waiting for the unreserved pool of
// limit's window (the route name, "" for the tenant).
func PoolKey(limit, window string) string { return "pool\x00" + limit + "\x00" + window }

// WaitRequest is a request asking to go upstream with waiting on.
type WaitRequest struct {
	Caller string
	// MaxWait and MaxWaiting are upstream_budget's.
	MaxWait    time.Duration
	MaxWaiting int
	// Keys are the queues the request must not overtake, most binding
	// first: its route's hold, then each window it counts in (WaitKeys).
	Keys []string
	// Reserved[i]: Caller holds a reserve in Keys[i]'s window, so it may
	// ask ahead of that queue.
	Reserved []bool
	// First puts the request ahead of callers without a reserve in a
	// hold's queue.
	First bool
	// Head puts the request at the head of a hold's queue, ahead of every
	// other waiter: it was sent once, and the vendor's 429 made the hold.
	Head bool
}

// WaitKeys are the queues a request of caller to route counts in under b
// (hold first when honour is set), with whether caller holds a reserve in
// each, for WaitRequest.
func WaitKeys(b Budget, caller, route string, honour bool) (keys []string, reserved []bool, first bool) {
	if honour {
		keys, reserved = append(keys, HoldKey(route)), append(reserved, false)
	}
	var limits []*budgetLimit
	switch bb := b.(type) {
	case *LocalBudget:
		limits = bb.limits
	case *RedisBudget:
		limits = bb.limits
	}
	for _, l := range limits {
		r, ok := l.windowRoute(route)
		if !ok {
			continue
		}
		has := l.reserve[caller] > 0
		first = first || has
		d := BudgetDecision{Limit: l.name, Window: r}
		keys, reserved = append(keys, d.WaitKey(caller)), append(reserved, has)
		d.Capped = true
		keys, reserved = append(keys, d.WaitKey(caller)), append(reserved, false)
	}
	return keys, reserved, first
}
