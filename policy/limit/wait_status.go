package limit

// What GET /budget and the status page show of the waiting requests
// (docs/upstream-budget.md#waiting-instead-of-refusing).

import "sort"

// WaitersStatus is who waits now on this replica: GET /budget's "waiting"
// and the status page's.
type WaitersStatus struct {
	// Total is the requests waiting now (faxgate_upstream_budget_waiting).
	Total int `json:"total"`
	// Callers is how many of them each caller has; callers with none are
	// absent.
	Callers map[string]int `json:"callers"`
	// Queues are the queues with their length and next try, by key order.
	Queues []QueueStatus `json:"queues"`
}

// QueueStatus is one queue: what its requests wait for.
type QueueStatus struct {
	// Kind is hold (a route's Retry-After), pool (a limit's unreserved
	// pool in one window) or cap (one caller's cap there).
	Kind string `json:"kind"`
	// Route is the held route, or the window's route ("" for a tenant
	// limit).
	Route string `json:"route,omitempty"`
	Limit string `json:"limit,omitempty"`
	// Caller is the capped caller (kind cap).
	Caller  string `json:"caller,omitempty"`
	Waiting int    `json:"waiting"`
	// NextTrySeconds is when the head asks again, from now.
	NextTrySeconds float64 `json:"next_try_seconds"`
}

// Waiters reports who waits now; safe to call at any time.
func (l *Waitlist) Waiters() WaitersStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	st := WaitersStatus{Total: l.n, Callers: make(map[string]int, len(l.byCaller)), Queues: []QueueStatus{}}
	for c, n := range l.byCaller {
		st.Callers[c] = n
	}
	for _, q := range l.queues {
		qs := queueStatus(q.key)
		qs.Waiting = len(q.ws)
		qs.NextTrySeconds = max(0, q.ws[0].at.Sub(now).Seconds())
		st.Queues = append(st.Queues, qs)
	}
	sort.Slice(st.Queues, func(i, j int) bool {
		a, b := st.Queues[i], st.Queues[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Limit != b.Limit {
			return a.Limit < b.Limit
		}
		if a.Route != b.Route {
			return a.Route < b.Route
		}
		return a.Caller < b.Caller
	})
	return st
}

// queueStatus reads a key back (HoldKey, WaitKey).
func queueStatus(key string) QueueStatus {
	var parts []string
	for start, i := 0, 0; i <= len(key); i++ {
		if i == len(key) || key[i] == 0 {
			parts = append(parts, key[start:i])
			start = i + 1
		}
	}
	qs := QueueStatus{Kind: parts[0]}
	switch {
	case qs.Kind == "hold" && len(parts) == 2:
		qs.Route = parts[1]
	case qs.Kind == "pool" && len(parts) == 3:
		qs.Limit, qs.Route = parts[1], parts[2]
	case qs.Kind == "cap" && len(parts) == 4:
		qs.Limit, qs.Route, qs.Caller = parts[1], parts[2], parts[3]
	}
	return qs
}
