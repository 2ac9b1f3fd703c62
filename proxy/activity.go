package proxy

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/faxgate/faxgate/policy"
)

// Per-caller activity for the status page (docs/status-page.md): requests
// and denials over the last 5 minutes, and whether the caller is being rate
// limited now. The request path pays a few atomic operations for it and
// nothing else: each caller's ring of per-step counters is built when the
// rules are set (SetRules), and a request reaches its caller's ring through
// the metric children it already looks up (pairMetrics.activity), so there
// is no lock, map lookup or allocation per request.

const (
	// ActivityStep is the width of one counter of the ring.
	ActivityStep = 10 * time.Second
	// activitySlots steps make the window: the current step and the 29
	// before it, between 4m50s and 5m of history.
	activitySlots = 30
	// ActivityWindow is what the counts cover, at most.
	ActivityWindow = activitySlots * ActivityStep
	// limitedNow is how recent a rate-limit refusal must be for the caller
	// to count as being limited now.
	limitedNow = ActivityStep
)

// The error codes activity tells apart: a caller that went away was not
// denied, and a rate-limit refusal is what "limited now" looks for.
const (
	codeClientClosed = "client_closed"
	codeRateLimited  = "rate_limited"
)

// stepCounter is one step's count, with the step it belongs to packed in
// its upper 32 bits, so that a counter left over from an earlier lap of the
// ring is recognised and restarted by the same compare-and-swap that counts.
type stepCounter struct{ v atomic.Uint64 }

func (c *stepCounter) add(step uint32) {
	for {
		old := c.v.Load()
		next := uint64(step)<<32 | 1
		if uint32(old>>32) == step {
			if uint32(old) == math.MaxUint32 {
				return // saturated; 4e9 answers in 10 s are not a caller's
			}
			next = old + 1
		}
		if c.v.CompareAndSwap(old, next) {
			return
		}
	}
}

// count is the counter's value when it belongs to a step in [from, to].
func (c *stepCounter) count(from, to uint32) uint64 {
	v := c.v.Load()
	if s := uint32(v >> 32); s-from <= to-from { // s in [from, to], wrap-safe
		return uint64(uint32(v))
	}
	return 0
}

// callerActivity is one caller's ring.
type callerActivity struct {
	requests [activitySlots]stepCounter
	denials  [activitySlots]stepCounter
	// lastLimited is the Unix time in ns of the caller's last rate-limit
	// refusal; 0 for never.
	lastLimited atomic.Int64
}

func activityStep(t time.Time) uint32 { return uint32(t.UnixNano() / int64(ActivityStep)) }

// record counts one answer at now: denied when the gateway answered it
// itself (faxgate_denied_total counts it too), limited when that answer was
// the caller's rate limit.
func (a *callerActivity) record(now time.Time, denied, limited bool) {
	if a == nil {
		return
	}
	s := activityStep(now)
	a.requests[s%activitySlots].add(s)
	if denied {
		a.denials[s%activitySlots].add(s)
		if limited {
			a.lastLimited.Store(now.UnixNano())
		}
	}
}

// CallerActivity is one caller's activity as the status page shows it.
type CallerActivity struct {
	// Requests are the answers of every kind over Window; Denials those
	// the gateway gave itself (an error code of docs/errors, as
	// faxgate_denied_total counts them).
	Requests uint64
	Denials  uint64
	// LastLimited is the caller's last rate-limit refusal (zero: none
	// since start); LimitedNow is true when it was under 10 s ago.
	LastLimited time.Time
	LimitedNow  bool
}

func (a *callerActivity) snapshot(now time.Time) CallerActivity {
	to := activityStep(now)
	from := to - (activitySlots - 1)
	var out CallerActivity
	for i := range activitySlots {
		out.Requests += a.requests[i].count(from, to)
		out.Denials += a.denials[i].count(from, to)
	}
	if ns := a.lastLimited.Load(); ns != 0 {
		out.LastLimited = time.Unix(0, ns)
		out.LimitedNow = now.Sub(out.LastLimited) < limitedNow
	}
	return out
}

// activityTable is the rings of one rules generation, by caller name: the
// configured callers and "unidentified". A reload keeps the ring of every
// caller that keeps its name.
type activityTable struct {
	byName map[string]*callerActivity
	names  []string // config order, unidentified last
}

func newActivityTable(callers []string, prev *activityTable) *activityTable {
	t := &activityTable{byName: make(map[string]*callerActivity, len(callers)+1)}
	for _, n := range append(callers[:len(callers):len(callers)], policy.UnidentifiedCaller) {
		if _, dup := t.byName[n]; dup {
			continue
		}
		a := (*callerActivity)(nil)
		if prev != nil {
			a = prev.byName[n]
		}
		if a == nil {
			a = new(callerActivity)
		}
		t.byName[n] = a
		t.names = append(t.names, n)
	}
	return t
}

// of is the ring of caller; nil (counting nothing) for a name outside the
// table, which the identifier never returns.
func (t *activityTable) of(caller string) *callerActivity {
	if t == nil {
		return nil
	}
	return t.byName[caller]
}

// Activity returns every caller's activity as of now, by caller name: each
// configured caller and "unidentified". It reads the counters without
// stopping the request path; counts a request is adding at that very moment
// may or may not be in.
func (h *Handler) Activity(now time.Time) map[string]CallerActivity {
	t := h.children.Load().activity
	out := make(map[string]CallerActivity, len(t.names))
	for _, n := range t.names {
		out[n] = t.byName[n].snapshot(now)
	}
	return out
}
