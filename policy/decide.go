package policy

import (
	"fmt"
	"path"

	"github.com/faxgate/faxgate/internal/config"
)

// Decision is the verdict for one caller on one route.
type Decision struct {
	// Allowed: the caller's allow list grants the route.
	Allowed bool
	// Sensitive: the route is in policy.sensitive, so the proxy writes an
	// audit line whether or not the request is allowed.
	Sensitive bool
	// Confirm: the route is in policy.confirm, so the proxy calls
	// CheckConfirm before forwarding.
	Confirm bool
}

// Policy answers what a caller may do. It is immutable and safe for
// concurrent use; every decision is computed at construction, so Decide is
// a map lookup.
type Policy struct {
	byCaller map[string]map[string]Decision
	// base holds Sensitive and Confirm for every route, for callers that are
	// not in the list: they are allowed nothing, but a request of theirs to a
	// sensitive route is still audited.
	base map[string]Decision
}

// NewPolicy compiles the callers' allow lists against the routes of t.
//
// callers and p must have passed config.Validate, which is the one place
// the rules for them live: allow entries and globs that name a route,
// unique caller names, and a sensitive route's path shared only with
// sensitive routes. The one check kept here is a guard that fails closed:
// a sensitive or confirm entry that is not a route of t would silently
// leave that route unprotected, so it is an error even though validated
// input never has one.
func NewPolicy(callers []config.Caller, p config.Policy, t *Table) (*Policy, error) {
	routes := t.routeNames()
	sensitive, err := routeSet("policy.sensitive", p.Sensitive, t)
	if err != nil {
		return nil, err
	}
	confirm, err := routeSet("policy.confirm", p.Confirm, t)
	if err != nil {
		return nil, err
	}
	pol := &Policy{
		byCaller: make(map[string]map[string]Decision, len(callers)),
		base:     make(map[string]Decision, len(routes)),
	}
	for _, r := range routes {
		pol.base[r] = Decision{Sensitive: sensitive[r], Confirm: confirm[r]}
	}
	for _, c := range callers {
		m := make(map[string]Decision, len(routes))
		for _, r := range routes {
			d := pol.base[r]
			d.Allowed = allows(c.Allow, r, sensitive[r])
			m[r] = d
		}
		pol.byCaller[c.Name] = m
	}
	return pol, nil
}

// allows reports whether the allow entries grant route. A sensitive route is
// granted only by an entry equal to its name: "*" and globs are written for
// the routes that exist today and must not reach a dangerous one by accident.
func allows(allow []string, route string, sensitive bool) bool {
	for _, a := range allow {
		if a == route {
			return true
		}
		if sensitive {
			continue
		}
		if ok, _ := path.Match(a, route); ok {
			return true
		}
	}
	return false
}

func routeSet(field string, names []string, t *Table) (map[string]bool, error) {
	set := make(map[string]bool, len(names))
	for i, n := range names {
		if !t.hasRoute(n) {
			return nil, fmt.Errorf("%s[%d]: no route named %q (the configuration was not validated)", field, i, n)
		}
		set[n] = true
	}
	return set, nil
}

// Decide returns the verdict for caller (a name from callers.list, possibly
// the callers.unidentified target) on route (a route name or "unmatched";
// never "auth", which the proxy handles itself). An unknown caller is
// allowed nothing; an unknown route is allowed to no one.
func (p *Policy) Decide(caller, route string) Decision {
	if m, ok := p.byCaller[caller]; ok {
		return m[route]
	}
	return p.base[route]
}
