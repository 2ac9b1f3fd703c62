package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/faxgate/faxgate/policy/routetable"
)

// validatePolicy checks policy: its route names, and that sensitivity
// follows the path (sensitivePaths).
func (v *validator) validatePolicy(p Policy, extra []Route) {
	known := map[string]bool{}
	for _, n := range routeNames(extra) {
		known[n] = true
	}
	check := func(key string, names []string) {
		for i, n := range names {
			path := fmt.Sprintf("policy.%s[%d]", key, i)
			switch {
			case n == "auth":
				v.add(path, `"auth" is governed by policy.auth_endpoint`)
			case !known[n]:
				v.add(path, "unknown route %s", v.q(path, n))
			}
		}
	}
	check("sensitive", p.Sensitive)
	check("confirm", p.Confirm)
	v.oneOf("policy.auth_endpoint", p.AuthEndpoint, "deny", "shim")
	v.sensitivePaths(p.Sensitive, extra)
}

// sensitivePaths checks that every route sharing a sensitive route's path
// is sensitive too. Sensitivity follows the path, not the method
// (docs/callers-and-policy.md): a request on that path gets the sensitive
// route's policy whatever its method, so another route there that is not
// sensitive would be a second, weaker policy for the same path. An extra
// route is reported at its path, a built-in one at the sensitive entry that
// shares it. Extra routes already reported for their name, method or path
// are left out.
func (v *validator) sensitivePaths(sensitive []string, extra []Route) {
	sens := map[string]bool{}
	for _, n := range sensitive {
		sens[n] = true
	}
	type entry struct {
		r     Route
		extra int // index in routes.extra; -1 for a built-in route
	}
	// byPath groups the usable routes by their path as the router
	// matches it (letter case and parameter names ignored).
	byPath := map[string][]entry{}
	pathOf := map[string]string{} // route name -> its key in byPath
	add := func(r Route, i int) {
		if validRoutePath(r.Path) && routetable.IsMethod(r.Method) {
			k := routeShape("", r.Path)
			byPath[k] = append(byPath[k], entry{r, i})
			pathOf[r.Name] = k
		}
	}
	for _, r := range BuiltinRoutes() {
		add(r, -1)
	}
	// One pass over the problems, not one per route: a file of aliases can
	// hold thousands of extra routes.
	refused := map[string]bool{}
	for _, p := range v.problems {
		if rest, ok := strings.CutPrefix(p.Path, "routes.extra["); ok {
			if i := strings.IndexByte(rest, ']'); i >= 0 {
				refused[rest[:i]] = true
			}
		}
	}
	for i, r := range extra {
		if !refused[strconv.Itoa(i)] {
			add(r, i)
		}
	}
	// report names a route e that takes requests of sensitive route n
	// (entry k of policy.sensitive) without being sensitive, once; shared
	// says whether it has the very same path or only names some of its
	// paths.
	reported := map[entry]bool{}
	report := func(k int, n string, e entry, shared bool) {
		if sens[e.r.Name] || reported[e] {
			return
		}
		reported[e] = true
		const why = " (sensitivity follows the path, not the method)"
		if e.extra < 0 {
			p := fmt.Sprintf("policy.sensitive[%d]", k)
			how := "names paths of"
			if shared {
				how = "shares the path of"
			}
			v.add(p, "built-in route %s %s sensitive route %s and must be in policy.sensitive too"+why,
				strconv.Quote(e.r.Name), how, v.q(p, n))
			return
		}
		p := fmt.Sprintf("routes.extra[%d].path", e.extra)
		how := "names paths of"
		if shared {
			how = "is the path of"
		}
		v.add(p, "%s %s sensitive route %s, so route %s must be in policy.sensitive too"+why,
			v.q(p, e.r.Path), how, strconv.Quote(n), v.q(fmt.Sprintf("routes.extra[%d].name", e.extra), e.r.Name))
	}
	for k, n := range sensitive {
		if key, ok := pathOf[n]; ok {
			for _, e := range byPath[key] {
				report(k, n, e, true)
			}
		}
	}
	// A route whose path has a fixed segment where a sensitive route's has a
	// parameter, or the other way round, names some of the same request
	// paths (/v1/faxes/inbox is a path of /v1/faxes/{faxId}); the router
	// picks the fixed one, so it would take those paths from the sensitive
	// route's policy and its audit line (routetable.TakesPaths). The routes
	// of one key share a shape, so the first of each stands for all.
	keys := make([]string, 0, len(byPath))
	for key := range byPath {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for k, n := range sensitive {
		key, ok := pathOf[n]
		if !ok {
			continue
		}
		for _, other := range keys {
			if routetable.OverlapOf(byPath[key][0].r.Path, byPath[other][0].r.Path) != routetable.TakesPaths {
				continue
			}
			for _, e := range byPath[other] {
				report(k, n, e, false)
			}
		}
	}
}
