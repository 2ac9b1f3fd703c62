package limit

// Waiting instead of refusing (upstream_budget.max_wait,
// docs/upstream-budget.md#waiting-instead-of-refusing).
//
// A request that a hold or a limit refuses waits in the queue of what
// refused it: the hold of its route, a limit's shared pool in one window, or
// its own cap in one window. Only the head of a queue ever asks again, and
// only at the time its last refusal named (Retry-After), on one timer of its
// own; every other waiter blocks on a channel until it becomes the head. So
// a queue of a thousand costs one pending timer, and the edge of a window
// wakes one request, not all of them. When the head is admitted, the next
// one asks at once (more than one slot may have freed); when it is refused
// again it re-arms for the new time, or moves to the queue of what refused
// it now. A waiter whose deadline falls before the head's next try can never
// be admitted in time, and is refused at once.
//
// Order: oldest first within a queue, and a request that arrives while a
// queue it would count in is waiting joins it behind the others without
// asking (no overtaking), except in a window where its caller holds a
// reserve: its reserve is its own, so it asks at once and passes if it is
// still within it. In a hold's queue callers with a reserve go first.

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/internal/base/clock"
)

// Outcome is one admission attempt's answer, as the waitlist needs it.
type Outcome struct {
	Allowed bool
	// Key names what refused: the queue a waiting request waits in
	// (HoldKey, BudgetDecision.WaitKey).
	Key string
	// RetryAfter is how long until the request could be admitted.
	RetryAfter time.Duration
	// Throttled: a hold refused (upstream_throttled); else a limit
	// (upstream_budget_exhausted) named by Limit.
	Throttled bool
	Limit     string
}

// DefaultWaitGuard is how long after its admission time a waiting request
// asks again. A burst admitted at once reaches the vendor spread by its
// transit time; the requests that wait for its slots are admitted together
// one window later and, fewer at once, travel faster: asked at the very
// edge they could reach the vendor inside the window they replace. The
// guard keeps them out of it (docs/upstream-budget.md#waiting-instead-of-refusing).
const DefaultWaitGuard = 100 * time.Millisecond

// WaitlistOptions configures a Waitlist.
type WaitlistOptions struct {
	// Clock times the waits; default clock.Real.
	Clock clock.Clock
	// Guard delays every wake-up past its admission time (DefaultWaitGuard
	// in the gateway), never past the request's deadline; 0 wakes at the
	// admission time itself.
	Guard time.Duration
	// Waiting, when set, is faxgate_upstream_budget_waiting.
	Waiting prometheus.Gauge
	// Evicted, when set, counts the waiters that gave their place up to a
	// request of a caller with fewer waiters
	// (faxgate_upstream_budget_wait_evicted_total).
	Evicted prometheus.Counter
}

// Waitlist holds this replica's waiting requests. It lives as long as the
// gateway, across reloads.
type Waitlist struct {
	clock   clock.Clock
	guard   time.Duration
	waiting prometheus.Gauge
	evicted prometheus.Counter

	mu       sync.Mutex
	queues   map[string]*waitQueue
	n        int
	seq      uint64
	byCaller map[string]int
	drainAt  time.Time // zero until Drain
}

// waitQueue is one key's waiters, in order.
type waitQueue struct {
	key  string
	ws   []*waiter
	last Outcome // the last refusal here, answered to those refused unasked
}

// waiter is one waiting request. It is touched under Waitlist.mu only.
type waiter struct {
	seq      uint64
	prio     bool // the caller holds a reserve where the request counts
	first    bool // prio, in a hold's queue: it goes ahead of callers without a reserve
	resend   bool // a request the vendor refused, waiting out the hold it made
	head     bool // resend, in a hold's queue: it goes ahead of everyone
	trying   bool // it is asking now: neither pruned nor drained meanwhile
	caller   string
	deadline time.Time
	at       time.Time // while head: when it asks next
	q        *waitQueue
	kick     chan struct{} // "look at your state again"; one pending signal is enough
	final    *Outcome      // set when the list answered it (and removed it)
}

// NewWaitlist builds an empty waitlist.
func NewWaitlist(o WaitlistOptions) *Waitlist {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return &Waitlist{clock: o.Clock, guard: max(o.Guard, 0), waiting: o.Waiting, evicted: o.Evicted, queues: map[string]*waitQueue{}, byCaller: map[string]int{}}
}

// Admit decides r with decide and, when it is refused and may wait, waits
// for its turn (see the top of this file). It returns the final outcome and
// how long the request waited (0 when it never queued). When ctx ends while
// it waits, it leaves at once, counted nowhere, and the outcome is a
// refusal (the caller is gone: nobody reads it).
func (l *Waitlist) Admit(ctx context.Context, r WaitRequest, decide Decide) (Outcome, time.Duration) {
	start := l.clock.Now()
	l.mu.Lock()
	deadline := start.Add(r.MaxWait)
	if !l.drainAt.IsZero() && l.drainAt.Before(deadline) {
		deadline = l.drainAt
	}
	var join *waitQueue
	var reserveOnly []string
	for i, k := range r.Keys {
		q := l.queues[k]
		if q == nil || len(q.ws) == 0 {
			continue
		}
		if i < len(r.Reserved) && r.Reserved[i] {
			// Its reserve is its own: it asks at once, but only the reserve
			// may admit it; the pool these waiters queue for is theirs first.
			reserveOnly = append(reserveOnly, k)
			continue
		}
		join = q
		break
	}
	w := &waiter{prio: r.First, resend: r.Head, caller: r.Caller, deadline: deadline, kick: make(chan struct{}, 1)}
	if join == nil {
		l.mu.Unlock()
		out := decide(ctx, reserveOnly)
		if out.Allowed || ctx.Err() != nil {
			return out, 0
		}
		now := l.clock.Now()
		l.mu.Lock()
		w.at = now.Add(out.RetryAfter)
		if w.at.After(deadline) {
			l.mu.Unlock()
			return out, 0
		}
		join = l.queue(out.Key)
		if len(join.ws) > 0 && join.ws[0].at.After(deadline) {
			// Others wait there already, and their next turn is too late.
			out.RetryAfter = max(join.ws[0].at.Sub(now), out.RetryAfter)
			l.dropIfEmpty(join)
			l.mu.Unlock()
			return out, 0
		}
		if !l.room(r.Caller, r.MaxWaiting, now) {
			l.dropIfEmpty(join)
			l.mu.Unlock()
			return out, 0
		}
		join = l.queue(out.Key) // the place given up may have been its last
		join.last = out
	} else {
		now := l.clock.Now()
		next := join.ws[0].at
		if next.After(deadline) || !l.room(r.Caller, r.MaxWaiting, now) {
			out := join.last
			out.RetryAfter = max(next.Sub(now), time.Millisecond)
			l.mu.Unlock()
			return out, 0
		}
		if last := join.last; len(join.ws) == 0 {
			// The place given up was this queue's only waiter: the
			// request leads it and asks at once.
			join = l.queue(join.key)
			join.last = last
		}
	}
	l.seq++
	w.seq = l.seq
	l.insert(join, w)
	l.n++
	l.byCaller[w.caller]++
	if l.waiting != nil {
		l.waiting.Inc()
	}
	l.mu.Unlock()
	out := l.wait(ctx, w, decide)
	return out, l.clock.Now().Sub(start)
}

// Decide is one admission attempt of a waiting request. reserveOnly names
// the pool queues (PoolKey) whose windows may admit it from its own reserve
// only (Budget.Admit); nil when it waits in a queue itself.
type Decide func(ctx context.Context, reserveOnly []string) Outcome

// dropIfEmpty forgets q when nobody waits in it (made by queue for a
// request that then did not join).
func (l *Waitlist) dropIfEmpty(q *waitQueue) {
	if len(q.ws) == 0 {
		delete(l.queues, q.key)
	}
}

// queue returns key's queue, made when missing.
func (l *Waitlist) queue(key string) *waitQueue {
	q := l.queues[key]
	if q == nil {
		q = &waitQueue{key: key}
		l.queues[key] = q
	}
	return q
}

// before orders waiters: resends first, then callers with a reserve (hold
// queues only set either), then oldest first.
func before(a, b *waiter) bool {
	if a.head != b.head {
		return a.head
	}
	if a.first != b.first {
		return a.first
	}
	return a.seq < b.seq
}

// insert places w in q by order; a new head takes over the old head's next
// try unless it knows its own, and the old head is told it no longer leads.
func (l *Waitlist) insert(q *waitQueue, w *waiter) {
	hold := strings.HasPrefix(q.key, "hold\x00")
	w.first, w.head = w.prio && hold, w.resend && hold
	i := sort.Search(len(q.ws), func(i int) bool { return before(w, q.ws[i]) })
	q.ws = append(q.ws, nil)
	copy(q.ws[i+1:], q.ws[i:])
	q.ws[i] = w
	w.q = q
	if i == 0 && len(q.ws) > 1 {
		old := q.ws[1]
		if w.at.IsZero() {
			w.at = old.at
		}
		signal(old)
	}
}

// remove takes w out of its queue and the counts. When w led, the next
// waiter leads from at on (the zero time: at once).
func (l *Waitlist) remove(w *waiter, at time.Time) {
	q := w.q
	for i, x := range q.ws {
		if x == w {
			q.ws = slices.Delete(q.ws, i, i+1)
			if i == 0 && len(q.ws) > 0 {
				q.ws[0].at = at
				signal(q.ws[0])
			}
			break
		}
	}
	if len(q.ws) == 0 {
		delete(l.queues, q.key)
	}
	w.q = nil
	l.n--
	if l.byCaller[w.caller]--; l.byCaller[w.caller] <= 0 {
		delete(l.byCaller, w.caller)
	}
	if l.waiting != nil {
		l.waiting.Dec()
	}
}

// prune answers, at once, the waiters behind q's head whose deadline falls
// before the head's next try: they could not be admitted in time.
func (l *Waitlist) prune(q *waitQueue, now time.Time) {
	if len(q.ws) < 2 {
		return
	}
	next := q.ws[0].at
	for _, w := range append([]*waiter(nil), q.ws[1:]...) {
		if w.deadline.Before(next) && !w.trying {
			out := q.last
			out.RetryAfter = max(next.Sub(now), time.Millisecond)
			w.final = &out
			l.remove(w, time.Time{})
			signal(w)
		}
	}
}

func signal(w *waiter) {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// wait is w's loop: block until it leads, sleep on one timer until its next
// try, ask, and act on the answer.
func (l *Waitlist) wait(ctx context.Context, w *waiter, decide Decide) Outcome {
	var t clock.Timer
	var tc <-chan time.Time
	var armed time.Time
	stop := func() {
		if t != nil {
			t.Stop()
			t, tc = nil, nil
		}
	}
	defer stop()
	for {
		l.mu.Lock()
		if w.final != nil {
			out := *w.final
			l.mu.Unlock()
			return out
		}
		now := l.clock.Now()
		try := false
		if q := w.q; q.ws[0] == w {
			if w.at.After(w.deadline) {
				// A drain moved the deadline before the next try.
				out := q.last
				out.RetryAfter = max(w.at.Sub(now), time.Millisecond)
				l.remove(w, time.Time{})
				l.mu.Unlock()
				return out
			}
			wake := w.at
			if l.guard > 0 && !w.at.IsZero() {
				wake = w.at.Add(l.guard)
				if wake.After(w.deadline) {
					wake = w.deadline
				}
				if wake.Before(w.at) {
					wake = w.at
				}
			}
			switch {
			case !wake.After(now):
				try = true
				stop()
			case tc == nil || !armed.Equal(wake):
				stop()
				t, armed = l.clock.NewTimer(wake.Sub(now)), wake
				tc = t.C()
			}
		} else {
			stop()
		}
		w.trying = try
		l.mu.Unlock()

		if try {
			out := decide(ctx, nil)
			l.mu.Lock()
			w.trying = false
			now := l.clock.Now()
			switch {
			case ctx.Err() != nil:
				l.remove(w, w.at)
				l.mu.Unlock()
				return Outcome{Key: out.Key, RetryAfter: time.Second, Throttled: out.Throttled, Limit: out.Limit}
			case out.Allowed:
				l.remove(w, time.Time{})
				l.mu.Unlock()
				return out
			}
			at := now.Add(out.RetryAfter)
			if at.After(w.deadline) {
				l.remove(w, time.Time{})
				l.mu.Unlock()
				return out
			}
			if out.Key != w.q.key {
				old := w.q
				l.removeFrom(old, w)
				nq := l.queue(out.Key)
				w.at = at
				l.insert(nq, w)
			}
			w.at = at
			w.q.last = out
			l.prune(w.q, now)
			if h := w.q.ws[0]; h != w {
				signal(h)
			}
			l.mu.Unlock()
			continue
		}
		select {
		case <-ctx.Done():
			l.mu.Lock()
			if w.final == nil {
				l.remove(w, w.at)
			}
			l.mu.Unlock()
			return Outcome{RetryAfter: time.Second}
		case <-w.kick:
		case <-tc:
			tc = nil
			t = nil
		}
	}
}

// removeFrom takes w out of q only (it moves to another queue): the counts
// stay, and q's next waiter leads at once.
func (l *Waitlist) removeFrom(q *waitQueue, w *waiter) {
	for i, x := range q.ws {
		if x == w {
			q.ws = slices.Delete(q.ws, i, i+1)
			if i == 0 && len(q.ws) > 0 {
				q.ws[0].at = time.Time{}
				signal(q.ws[0])
			}
			break
		}
	}
	if len(q.ws) == 0 {
		delete(l.queues, q.key)
	}
}

// Drain bounds every wait, present and future, by deadline: on SIGTERM the
// gateway answers every waiter before server.shutdown_timeout
// (docs/upstream-budget.md#waiting-instead-of-refusing). A waiter whose next
// try falls after deadline gets its 429 at once.
func (l *Waitlist) Drain(deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drainAt = deadline
	now := l.clock.Now()
	for _, q := range l.queues {
		for _, w := range q.ws {
			if w.deadline.After(deadline) {
				w.deadline = deadline
			}
		}
	}
	for _, q := range l.queues {
		l.prune(q, now)
		if len(q.ws) > 0 {
			signal(q.ws[0])
		}
	}
}
