package limit

import (
	"context"
	"sort"
	"sync"
	"time"
)

// LocalBudget keeps the budget's windows in this process: with
// rate_limit.backend local, and as the Redis budget's fallback, at
// requests / replicas_hint per window.
type LocalBudget struct {
	now    func() time.Time
	limits []*budgetLimit
	met    *Metrics
	store  *windowStore
}

// windowStore holds the windows with the one lock that guards them. A reload
// hands the same store to the new budget, so requests still deciding by the
// old rules and new ones by the new rules share the lock as well as the
// windows.
type windowStore struct {
	mu      sync.Mutex
	windows map[windowKey]*window
}

var _ Budget = (*LocalBudget)(nil)

type windowKey struct{ limit, route string }

// window is the exact log of a window's admitted requests, oldest first.
type window struct {
	entries []windowEntry
	head    int // entries[:head] have left the window
	counts  map[string]int
}

type windowEntry struct {
	at     time.Time
	caller string
}

func newLocalBudget(limits []*budgetLimit, now func() time.Time, m *Metrics) *LocalBudget {
	return &LocalBudget{now: now, limits: limits, met: m, store: &windowStore{windows: map[windowKey]*window{}}}
}

// inherit takes over prev's windows (and their lock) for limits that keep
// their name, so a reload neither forgets nor repeats what was admitted;
// the windows of limits that are gone are dropped.
func (b *LocalBudget) inherit(prev *LocalBudget) {
	if prev == nil {
		return
	}
	names := map[string]bool{}
	for _, l := range b.limits {
		names[l.name] = true
	}
	b.store = prev.store
	b.store.mu.Lock()
	defer b.store.mu.Unlock()
	for k := range b.store.windows {
		if !names[k.limit] {
			delete(b.store.windows, k)
		}
	}
}

// trim drops the entries that left the window at now.
func (w *window) trim(now time.Time, per time.Duration) {
	cut := now.Add(-per)
	for w.head < len(w.entries) && !w.entries[w.head].at.After(cut) {
		e := w.entries[w.head]
		if w.counts[e.caller]--; w.counts[e.caller] <= 0 {
			delete(w.counts, e.caller)
		}
		w.entries[w.head] = windowEntry{}
		w.head++
	}
	// Reuse the slice once most of it is spent.
	if w.head > 64 && w.head*2 > len(w.entries) {
		n := copy(w.entries, w.entries[w.head:])
		clear(w.entries[n:])
		w.entries, w.head = w.entries[:n], 0
	}
}

func (w *window) used() int { return len(w.entries) - w.head }

// check decides c in one window; when refused, retry is how long until a
// slot this caller may use frees, and byCap says that the caller's cap, not
// the pool, sets that time.
// With closed, the caller may use its reserve only, not the pool.
func (l *budgetLimit) check(w *window, caller string, now time.Time, closed bool) (ok bool, retry time.Duration, byCap bool) {
	u := w.counts[caller]
	capped := u >= l.capOf(caller)
	pooled := u >= l.reserve[caller] && (closed || l.poolUsed(w.counts) >= l.pool)
	if !capped && !pooled {
		return true, 0, false
	}
	// Only an explicit cap is the caller's own queue; N binds everyone.
	_, ownCap := l.cap[caller]
	byCap = capped && ownCap
	retry = l.per // nothing this caller may use will free within the window
	if capped {
		// c's entry whose expiry brings u_c below its cap.
		need := u - l.capOf(caller) + 1
		for _, e := range w.entries[w.head:] {
			if e.caller == caller {
				if need--; need == 0 {
					retry = e.at.Add(l.per).Sub(now)
					break
				}
			}
		}
	}
	if pooled {
		for _, e := range w.entries[w.head:] {
			if e.caller == caller || w.counts[e.caller] > l.reserve[e.caller] {
				r := e.at.Add(l.per).Sub(now)
				if r >= retry || !capped {
					byCap = false // the pool frees no sooner: the shared queue
				}
				if !capped || r > retry {
					retry = r
				}
				break
			}
		}
	}
	return false, max(retry, time.Millisecond), byCap
}

// Admit implements Budget.
func (b *LocalBudget) Admit(_ context.Context, caller, route string, reserveOnly []string) BudgetDecision {
	b.store.mu.Lock()
	defer b.store.mu.Unlock()
	// The clock is read under the lock, so a window's entries stay in time
	// order, which trim and Retry-After rely on.
	now := b.now()
	var ws [4]*window
	apply := ws[:0]
	var limits [4]*budgetLimit
	applied := limits[:0]
	d := BudgetDecision{Allowed: true}
	for _, l := range b.limits {
		r, ok := l.windowRoute(route)
		if !ok {
			continue
		}
		k := windowKey{l.name, r}
		w := b.store.windows[k]
		if w == nil {
			w = &window{counts: map[string]int{}}
			b.store.windows[k] = w
		}
		w.trim(now, l.per)
		if ok, retry, byCap := l.check(w, caller, now, len(reserveOnly) > 0 && l.closedTo(r, reserveOnly)); !ok {
			if d.Allowed || retry > d.RetryAfter {
				d = BudgetDecision{Limit: l.name, RetryAfter: retry, Window: r, Capped: byCap}
			}
		}
		apply, applied = append(apply, w), append(applied, l)
	}
	if d.Allowed {
		for _, w := range apply {
			w.entries = append(w.entries, windowEntry{at: now, caller: caller})
			w.counts[caller]++
		}
	}
	if b.met != nil {
		for i, w := range apply {
			r, _ := applied[i].windowRoute(route)
			b.met.observeWindow(applied[i].name, r, float64(w.used())/float64(applied[i].n), now)
			if d.Allowed {
				b.met.BudgetSpent.WithLabelValues(caller, applied[i].name).Inc()
			}
		}
	}
	return d
}

// Status implements Budget.
func (b *LocalBudget) Status(context.Context) BudgetStatus {
	b.store.mu.Lock()
	defer b.store.mu.Unlock()
	now := b.now()
	st := BudgetStatus{Backend: "local"}
	for _, l := range b.limits {
		ls := LimitStatus{Name: l.name, Scope: l.scope(), Requests: l.requests, Effective: l.n, Per: l.per.String(),
			Windows: []WindowStatus{}}
		for k, w := range b.store.windows {
			if k.limit != l.name {
				continue
			}
			w.trim(now, l.per)
			if w.used() == 0 && !l.tenant {
				continue
			}
			ls.Windows = append(ls.Windows, l.windowStatus(k.route, w.counts))
		}
		if l.tenant && len(ls.Windows) == 0 {
			ls.Windows = append(ls.Windows, l.windowStatus("", nil))
		}
		sort.Slice(ls.Windows, func(i, j int) bool { return ls.Windows[i].Route < ls.Windows[j].Route })
		st.Limits = append(st.Limits, ls)
	}
	return st
}

// windowStatus reports a window: every caller with entries or a share.
func (l *budgetLimit) windowStatus(route string, counts map[string]int) WindowStatus {
	ws := WindowStatus{Route: route, Pool: l.pool, PoolUsed: l.poolUsed(counts), Callers: map[string]CallerWindow{}}
	for _, u := range counts {
		ws.Used += u
	}
	ws.Remaining = max(0, l.n-ws.Used)
	for c := range counts {
		ws.Callers[c] = l.callerView(c, counts)
	}
	for c := range l.reserve {
		ws.Callers[c] = l.callerView(c, counts)
	}
	for c := range l.cap {
		ws.Callers[c] = l.callerView(c, counts)
	}
	return ws
}
