package config

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// budgetNameRE is what a limit's name may be: it is a metric label value.
var budgetNameRE = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)

// validateUpstreamBudget checks upstream_budget (docs/configuration.md,
// docs/upstream-budget.md).
func (v *validator) validateUpstreamBudget(b UpstreamBudget, callers []Caller, shutdown time.Duration) {
	v.positive("upstream_budget.max_hold", b.MaxHold)
	switch {
	case b.MaxWait < 0:
		v.add("upstream_budget.max_wait", "must be 0 (refuse at once) or more, got %s", v.q("upstream_budget.max_wait", b.MaxWait.String()))
	case b.MaxWait > shutdown && shutdown > 0:
		// A drain answers every waiter within server.shutdown_timeout
		// (docs/upstream-budget.md, Waiting instead of refusing): a longer
		// max_wait would promise waits that every rolling restart cuts.
		v.add("upstream_budget.max_wait", "must be at most server.shutdown_timeout (%s), got %s",
			shutdown, v.q("upstream_budget.max_wait", b.MaxWait.String()))
	}
	if b.MaxWaiting < 1 {
		v.add("upstream_budget.max_waiting", "must be at least 1, got %s", v.qint("upstream_budget.max_waiting", int64(b.MaxWaiting)))
	}
	if b.RetryThrottled && b.MaxWait <= 0 {
		v.add("upstream_budget.retry_throttled", "needs upstream_budget.max_wait above 0: a vendor 429 is waited out within it")
	}
	if b.RetryThrottled && !b.HonorRetryAfter {
		v.add("upstream_budget.retry_throttled", "needs upstream_budget.honor_retry_after: the request waits for its route's hold to end")
	}
	seen := map[string]bool{}
	for i, l := range b.Limits {
		p := fmt.Sprintf("upstream_budget.limits[%d]", i)
		switch {
		case !budgetNameRE.MatchString(l.Name):
			v.add(p+".name", "invalid limit name %s (want [a-z0-9-]{1,63})", v.q(p+".name", l.Name))
		case seen[l.Name]:
			v.add(p+".name", "duplicate limit name %s", v.q(p+".name", l.Name))
		}
		seen[l.Name] = true
		v.oneOf(p+".scope", l.Scope, "route", "tenant")
		if l.Requests <= 0 {
			v.add(p+".requests", "must be greater than 0, got %s", v.qint(p+".requests", int64(l.Requests)))
		}
		v.positive(p+".per", l.Per)
	}
	known := map[string]bool{}
	for _, c := range callers {
		known[c.Name] = true
	}
	names := make([]string, 0, len(b.Shares))
	for n := range b.Shares {
		names = append(names, n)
	}
	slices.Sort(names)
	total := 0.0
	for _, n := range names {
		s, p := b.Shares[n], "upstream_budget.shares."+n
		if !known[n] {
			v.add(p, "unknown caller %s (shares name callers of callers.list)", strconv.Quote(n))
		}
		if !(s.Reserve >= 0 && s.Reserve <= 1) {
			v.add(p+".reserve", "must be between 0 and 1, got %s", v.qfloat(p+".reserve", s.Reserve))
		} else {
			total += s.Reserve
		}
		if s.Cap != nil {
			switch c := *s.Cap; {
			case !(c > 0 && c <= 1):
				v.add(p+".cap", "must be greater than 0 and at most 1, got %s", v.qfloat(p+".cap", c))
			case c < s.Reserve:
				v.add(p+".cap", "must be at least the caller's reserve (%s), got %s",
					strconv.FormatFloat(s.Reserve, 'g', -1, 64), v.qfloat(p+".cap", c))
			}
		}
	}
	// A little slack for sums like 0.1 + 0.2 + 0.7 in binary floating point.
	if total > 1+1e-9 {
		v.add("upstream_budget.shares", "the reserves add up to %s, more than 1",
			strconv.FormatFloat(math.Round(total*1e6)/1e6, 'g', -1, 64))
	}
	if len(b.Shares) > 0 && len(b.Limits) == 0 {
		v.add("upstream_budget.shares", "shares apply to upstream_budget.limits, and there are none")
	}
}
