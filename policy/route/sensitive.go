package route

import (
	"net/http"
	"strings"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy/routetable"
)

// Resolver resolves request-targets with the routes of one Table and the
// rules that need to know which routes are sensitive. It is immutable.
type Resolver struct {
	table *Table
	// below holds the sensitive routes' paths.
	below *sensitivePaths
	// shadows: per route, the sensitive routes below whose path it can
	// match a request only through a parameter (nil when none).
	shadows map[string][]sensitivePattern
}

// NewResolver builds the resolver of t, where sensitive reports whether a
// route is in policy.sensitive.
func NewResolver(t *Table, sensitive func(route string) bool) *Resolver {
	return &Resolver{table: t, below: newSensitivePaths(t, sensitive), shadows: newShadows(t, sensitive)}
}

// Resolve resolves a request-target like Table.Resolve and applies the one
// routing rule that needs policy (docs/callers-and-policy.md): a path under
// /v1/ that matches no route but lies below the path of a route in
// policy.sensitive (/v1/numbers/delete/x) is refused with 403 forbidden,
// for every caller and whatever routes.unmatched says. An upstream that
// routes by prefix, or ignores trailing segments, could otherwise read it
// as the sensitive route, reached as "unmatched" around its policy.
//
// The same holds for a path that matches a route only by accident: a route
// whose pattern reaches below a sensitive route's path through a parameter
// where the sensitive route has a fixed segment, or the other way round
// (routes.extra /v1/numbers/{id}/status matches /v1/numbers/delete/status).
// Only a route configured below the sensitive route's own pattern
// (/v1/numbers/delete/preview) is reached there on purpose.
func (r *Resolver) Resolve(method, requestURI string) (Target, *Error) {
	tgt, err := r.table.resolve(method, requestURI)
	if err != nil {
		return tgt, err
	}
	if tgt.Route != RouteUnmatched {
		if r.shadows != nil {
			for _, s := range r.shadows[tgt.Route] {
				if s.prefixOf(tgt.Path) {
					return Target{}, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
						Message: "the path lies below sensitive route " + s.route + " and matches route " + tgt.Route + " only through a parameter"}
				}
			}
		}
		return tgt, nil
	}
	if route := r.below.under(tgt.Path); route != "" {
		return Target{}, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
			Message: "the path lies below sensitive route " + route + " and matches no route"}
	}
	if r.table.unmatchedDeny {
		return Target{}, unknownRoute("no route for this path")
	}
	return tgt, nil
}

// sensitivePaths is a trie of the path patterns of the sensitive routes
// (after "/v1/"), built once when the rules are compiled, so that checking
// an unmatched path costs one walk of a few nodes and never a scan of the
// configuration.
type sensitivePaths struct {
	fixed []*sensitivePaths
	param *sensitivePaths
	name  string // this node's fixed segment, as configured
	route string // the sensitive route whose path ends here, if any
}

// newSensitivePaths collects the paths of t's sensitive routes.
func newSensitivePaths(t *Table, sensitive func(string) bool) *sensitivePaths {
	root := &sensitivePaths{}
	for _, rt := range t.Routes() {
		if !sensitive(rt.Name) {
			continue
		}
		n := root
		for _, seg := range strings.Split(strings.TrimPrefix(rt.Path, "/v1/"), "/") {
			n = n.child(seg)
		}
		if n.route == "" {
			n.route = rt.Name
		}
	}
	return root
}

// child returns the node for the pattern segment seg, creating it.
func (n *sensitivePaths) child(seg string) *sensitivePaths {
	if _, ok := routetable.ParamName(seg); ok {
		if n.param == nil {
			n.param = &sensitivePaths{}
		}
		return n.param
	}
	for _, c := range n.fixed {
		if ascii.EqualFold(c.name, seg) {
			return c
		}
	}
	c := &sensitivePaths{name: seg}
	n.fixed = append(n.fixed, c)
	return c
}

// under returns the sensitive route whose path is a proper prefix of path
// (a validated "/v1/..." path without a trailing slash), or "". Matching
// ignores ASCII case, as routing does, and a parameter matches any segment.
func (n *sensitivePaths) under(path string) string {
	if n == nil || len(path) < len("/v1/") {
		return ""
	}
	return n.walk(path[len("/v1/"):])
}

func (n *sensitivePaths) walk(rest string) string {
	if rest == "" {
		return ""
	}
	if n.route != "" {
		return n.route // segments follow this sensitive route's path
	}
	seg, tail, _ := strings.Cut(rest, "/")
	for _, c := range n.fixed {
		if ascii.EqualFold(c.name, seg) {
			if r := c.walk(tail); r != "" {
				return r
			}
		}
	}
	if n.param != nil {
		return n.param.walk(tail)
	}
	return ""
}

// sensitivePattern is a sensitive route's path pattern, split after "/v1/".
type sensitivePattern struct {
	route string
	path  string   // as configured
	segs  []string // fixed segments as configured; "" for a parameter
}

func splitPattern(path string) []string {
	segs := strings.Split(strings.TrimPrefix(path, "/v1/"), "/")
	for i, s := range segs {
		if _, ok := routetable.ParamName(s); ok {
			segs[i] = ""
		}
	}
	return segs
}

// prefixOf reports whether the pattern matches the first segments of path
// (a resolved "/v1/..." path) and more segments follow.
func (p *sensitivePattern) prefixOf(path string) bool {
	rest := path[len("/v1/"):]
	for _, want := range p.segs {
		seg, tail, more := strings.Cut(rest, "/")
		if !more || want != "" && !ascii.EqualFold(want, seg) {
			return false
		}
		rest = tail
	}
	return true
}

// newShadows finds, for every route that is not sensitive, the sensitive
// routes below whose path it can match a request path without having been
// configured there (routetable.ReachesBelow: a parameter where the
// sensitive pattern has a fixed segment or the other way round). Routes
// that cannot are absent, so that Resolve costs nothing for them.
func newShadows(t *Table, sensitive func(string) bool) map[string][]sensitivePattern {
	routes := t.Routes()
	var sens []sensitivePattern
	for _, rt := range routes {
		if sensitive(rt.Name) {
			sens = append(sens, sensitivePattern{route: rt.Name, path: rt.Path, segs: splitPattern(rt.Path)})
		}
	}
	var out map[string][]sensitivePattern
	for _, rt := range routes {
		if sensitive(rt.Name) {
			continue
		}
		for _, s := range sens {
			if routetable.OverlapOf(s.path, rt.Path) == routetable.ReachesBelow {
				if out == nil {
					out = map[string][]sensitivePattern{}
				}
				out[rt.Name] = append(out[rt.Name], s)
			}
		}
	}
	return out
}
