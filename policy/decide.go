package policy

import (
	"fmt"
	"path"
	"strings"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy/route"
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
	// AuditIDs: the route's audit line names the body's number_id and
	// order_id (AuditCarriesIDs).
	AuditIDs bool
}

// Policy answers what a caller may do. It is immutable and safe for
// concurrent use; every decision is computed at construction, so Decide is
// two map lookups and an index.
type Policy struct {
	// index numbers the routes; base and the allowed slices are by number.
	index map[string]int
	// base holds Sensitive and Confirm for every route, for callers that are
	// not in the list: they are allowed nothing, but a request of theirs to a
	// sensitive route is still audited.
	base []Decision
	// byCaller: which routes each caller may use. Callers with the same
	// allow list share one slice (most fleets have a handful of lists for
	// thousands of callers), which keeps a reload of a large file fast.
	byCaller map[string][]bool
	// callers are the configured names, in the file's order.
	callers []string
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
func NewPolicy(callers []config.Caller, p config.Policy, t *route.Table) (*Policy, error) {
	routes := t.RouteNames()
	sensitive, err := routeSet("policy.sensitive", p.Sensitive, t)
	if err != nil {
		return nil, err
	}
	confirm, err := routeSet("policy.confirm", p.Confirm, t)
	if err != nil {
		return nil, err
	}
	pol := &Policy{
		index:    make(map[string]int, len(routes)),
		base:     make([]Decision, len(routes)),
		byCaller: make(map[string][]bool, len(callers)),
	}
	for i, r := range routes {
		pol.index[r] = i
		pol.base[i] = Decision{Sensitive: sensitive[r], Confirm: confirm[r]}
		pol.base[i].AuditIDs = AuditCarriesIDs(r, pol.base[i])
	}
	// Every distinct allow entry is matched against the routes once, and
	// every distinct allow list is built once from its entries.
	byEntry := make(map[string][]bool)
	byList := make(map[string][]bool)
	for _, c := range callers {
		key := strings.Join(c.Allow, "\x00")
		allowed, ok := byList[key]
		if !ok {
			allowed = make([]bool, len(routes))
			for _, a := range c.Allow {
				grants, ok := byEntry[a]
				if !ok {
					grants = grantedBy(a, routes, sensitive)
					byEntry[a] = grants
				}
				for i, g := range grants {
					allowed[i] = allowed[i] || g
				}
			}
			byList[key] = allowed
		}
		pol.byCaller[c.Name] = allowed
		pol.callers = append(pol.callers, c.Name)
	}
	return pol, nil
}

// grantedBy reports, for each route, whether the allow entry grants it. A
// sensitive route is granted only by an entry equal to its name: "*" and
// globs are written for the routes that exist today and must not reach a
// dangerous one by accident.
func grantedBy(entry string, routes []string, sensitive map[string]bool) []bool {
	grants := make([]bool, len(routes))
	literal := !strings.ContainsAny(entry, `*?[\`)
	for i, r := range routes {
		switch {
		case entry == r:
			grants[i] = true
		case literal || sensitive[r]:
		default:
			grants[i], _ = path.Match(entry, r)
		}
	}
	return grants
}

func routeSet(field string, names []string, t *route.Table) (map[string]bool, error) {
	set := make(map[string]bool, len(names))
	for i, n := range names {
		if !t.HasRoute(n) {
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
	i, ok := p.index[route]
	if !ok {
		return Decision{}
	}
	d := p.base[i]
	if allowed := p.byCaller[caller]; allowed != nil {
		d.Allowed = allowed[i]
	}
	return d
}

// Callers returns the configured caller names, in the file's order: the
// caller label values the config makes known (docs/metrics-and-alerts.md).
// The slice is shared; it must not be modified.
func (p *Policy) Callers() []string { return p.callers }

// Base returns what policy says about route whoever calls: Sensitive and
// Confirm as configured, Allowed false. The proxy uses it to audit a request
// to a sensitive route before (and whether or not) the caller is known.
func (p *Policy) Base(route string) Decision {
	if i, ok := p.index[route]; ok {
		return p.base[i]
	}
	return Decision{}
}
