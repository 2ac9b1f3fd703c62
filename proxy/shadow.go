package proxy

// Shadow mode (docs/callers-and-policy.md#trying-a-change-in-shadow-mode): a
// candidate configuration decides every request too, with the same pipeline
// (policy.Rules.Decide) and state of its own, and only reports: a metric per
// decision, shadow on the access line when it differs from the live
// outcome, and the last 5 minutes' differences per caller for the status
// page. It never changes or delays an answer: it decides once the answer is
// given, without waiting for the budget, and when its limits are shared
// through Redis it decides on a goroutine of its own, which then writes the
// request's access line.

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/route"
)

// maxShadowInFlight bounds the candidate decisions running on goroutines of
// their own; past it a request's candidate decision is skipped (and
// counted), never waited for.
const maxShadowInFlight = 256

// outcomeAllowed is the outcome of a request the configuration lets go.
const outcomeAllowed = "allowed"

// shadow is the candidate in force: its rules, and its differences.
type shadow struct {
	rules *policy.Rules
	// async: the candidate's limits ask Redis, so it decides off the
	// request's goroutine.
	async bool
	diffs *shadowDiffs
}

// SetShadow puts candidate rules beside the live ones, or takes them away
// (nil): from the next request on, every request is decided by both. The
// differences of a candidate that stays are kept across a reload; those of
// one taken away go, with its series of faxgate_shadow_decisions_total.
func (h *Handler) SetShadow(r *policy.Rules) {
	if r == nil {
		if h.shadow.Swap(nil) != nil {
			h.opts.Metrics.ShadowDecisions.Reset()
		}
		return
	}
	sh := &shadow{rules: r, async: r.Shared()}
	if prev := h.shadow.Load(); prev != nil {
		sh.diffs = prev.diffs
	} else {
		sh.diffs = newShadowDiffs()
	}
	h.opts.Metrics.startShadowSeries(h.Rules(), r)
	h.shadow.Store(sh)
}

// ShadowRules returns the candidate's rules in force, nil when none.
func (h *Handler) ShadowRules() *policy.Rules {
	if sh := h.shadow.Load(); sh != nil {
		return sh.rules
	}
	return nil
}

// liveOutcome is what the live configuration decided for ex: allowed, or
// the refusal's error code.
func liveOutcome(ex *exchange) string {
	if ex.out.Refusal != nil {
		return ex.out.Refusal.Code
	}
	return outcomeAllowed
}

// decideShadow decides ex's request with the candidate sh and records it.
// It reads only the request's facts, which nothing changes any more once
// the live answer is given. The candidate never waits: its admission has no
// waiting room, and the caller's leaving (the answer is given) is no
// refusal of its.
func (h *Handler) decideShadow(ctx context.Context, sh *shadow, ex *exchange, now time.Time) {
	f := ex.facts
	f.Departure = nil
	// The live configuration refused before it read the body: what the
	// candidate decides on the body (the confirmation) counts as passed.
	f.BodyUnseen = f.HasBody && !f.BodyReady && !ex.bodyFailed()
	var o policy.Outcome
	sh.rules.Identify(&f, &o)
	sh.rules.Decide(ctx, &f, h.opts.ShadowAdmission, &o)
	live := liveOutcome(ex)
	cand := outcomeAllowed
	switch {
	case o.NeedBody:
		// The body the live configuration failed to read (too large, too
		// slow, cut short): the same body fails the candidate the same way.
		cand = live
	case o.Refusal != nil:
		cand = o.Refusal.Code
	}
	h.opts.Metrics.ShadowDecisions.WithLabelValues(ex.out.Caller, ex.out.Route, live, cand).Inc()
	if cand != live {
		ex.shadow = cand
		sh.diffs.record(now, ex.out.Caller, live, cand)
	}
}

// bodyFailed reports whether the live configuration allowed ex's request
// as far as its body and then failed to read it.
func (ex *exchange) bodyFailed() bool { return ex.out.NeedBody && ex.out.Refusal != nil }

// shadowAndLog decides ex's request with the candidate in force, if any,
// then writes its access line: at once when the candidate decides without
// Redis, else on a goroutine of its own, so that no Redis round trip of the
// candidate's is on the request's path.
func (h *Handler) shadowAndLog(ctx context.Context, ex *exchange, now time.Time) {
	sh := h.shadow.Load()
	if sh == nil {
		h.accessLine(ex, now)
		return
	}
	ctx = context.WithoutCancel(ctx)
	if !sh.async {
		h.decideShadow(ctx, sh, ex, now)
		h.accessLine(ex, now)
		return
	}
	select {
	case h.shadowSlots <- struct{}{}:
	default:
		h.opts.Metrics.ShadowSkipped.Inc()
		h.accessLine(ex, now)
		return
	}
	go func() {
		defer func() { <-h.shadowSlots }()
		h.decideShadow(ctx, sh, ex, now)
		h.accessLine(ex, now)
	}()
}

// WaitShadow waits until the candidate decisions running on goroutines of
// their own have written their access lines, or ctx ends (false). It takes
// every slot, so a request answered meanwhile is not decided by the
// candidate (counted in faxgate_shadow_skipped_total): the gateway calls it
// once its listeners are drained, so that no access line is lost at exit.
func (h *Handler) WaitShadow(ctx context.Context) bool {
	for range cap(h.shadowSlots) {
		select {
		case h.shadowSlots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// ShadowDifference is one kind of disagreement of a caller's requests over
// the last 5 minutes: what the live configuration decided, what the
// candidate would have, and how many times.
type ShadowDifference struct {
	Live      string `json:"live"`
	Candidate string `json:"candidate"`
	Count     uint64 `json:"count"`
}

// ShadowDifferences returns, per caller, the differences of the last 5
// minutes (ActivityWindow) as of now, most frequent first; nil when no
// candidate is in force.
func (h *Handler) ShadowDifferences(now time.Time) map[string][]ShadowDifference {
	sh := h.shadow.Load()
	if sh == nil {
		return nil
	}
	return sh.diffs.snapshot(now)
}

// shadowDiffs counts the differences per caller and kind in steps of
// ActivityStep over ActivityWindow. Differences are the exception, so a
// lock is cheap here.
type shadowDiffs struct {
	mu    sync.Mutex
	kinds map[diffKey]*[activitySlots]diffSlot
}

type diffKey struct{ caller, live, cand string }

type diffSlot struct {
	step  int64
	count uint64
}

func newShadowDiffs() *shadowDiffs {
	return &shadowDiffs{kinds: map[diffKey]*[activitySlots]diffSlot{}}
}

func (d *shadowDiffs) record(now time.Time, caller, live, cand string) {
	step := now.UnixNano() / int64(ActivityStep)
	d.mu.Lock()
	defer d.mu.Unlock()
	k := diffKey{caller, live, cand}
	ring := d.kinds[k]
	if ring == nil {
		ring = new([activitySlots]diffSlot)
		d.kinds[k] = ring
	}
	s := &ring[step%activitySlots]
	if s.step != step {
		s.step, s.count = step, 0
	}
	s.count++
}

func (d *shadowDiffs) snapshot(now time.Time) map[string][]ShadowDifference {
	step := now.UnixNano() / int64(ActivityStep)
	out := map[string][]ShadowDifference{}
	d.mu.Lock()
	for k, ring := range d.kinds {
		var n uint64
		for _, s := range ring {
			if step-s.step < activitySlots && s.step <= step {
				n += s.count
			}
		}
		if n == 0 {
			delete(d.kinds, k) // nothing left in the window
			continue
		}
		out[k.caller] = append(out[k.caller], ShadowDifference{Live: k.live, Candidate: k.cand, Count: n})
	}
	d.mu.Unlock()
	for _, ds := range out {
		sort.Slice(ds, func(i, j int) bool {
			if ds[i].Count != ds[j].Count {
				return ds[i].Count > ds[j].Count
			}
			return ds[i].Live+ds[i].Candidate < ds[j].Live+ds[j].Candidate
		})
	}
	return out
}

// startShadowSeries creates faxgate_shadow_decisions_total at 0 for every
// caller and route of the live rules, agreeing (allowed, allowed), so that
// the agreement panel's rate() sees the first decisions.
func (m *Metrics) startShadowSeries(live, _ *policy.Rules) {
	if live == nil || live.Policy == nil || live.Table == nil {
		return
	}
	for _, c := range live.Policy.Callers() {
		for _, r := range live.Table.RouteNames() {
			if r != route.RouteAuth {
				m.ShadowDecisions.WithLabelValues(c, r, outcomeAllowed, outcomeAllowed)
			}
		}
	}
}
