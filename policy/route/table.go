package route

import (
	"fmt"
	"strings"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy/routetable"
)

// RouteUnmatched is the route name of a request under /v1/ that matches no
// route (docs/callers-and-policy.md).
const RouteUnmatched = routetable.Unmatched

// RouteAuth is the built-in route of the token endpoint, which the gateway
// owns and never forwards for a caller.
const RouteAuth = routetable.Auth

// Table resolves request-targets to routes. It is immutable after
// construction and safe for concurrent use.
type Table struct {
	routes        []routetable.Route
	root          node // the node of the "v1" segment
	unmatchedDeny bool
}

// node is one path segment of the route trie. Children are a short slice
// rather than a map: fan-out is small, and a slice lets matching compare
// case-insensitively in place without lower-casing (allocating) the segment.
type node struct {
	fixed  []*node
	param  *node
	name   string  // canonical spelling of a fixed segment
	routes []route // routes whose path ends at this node, in table order
}

// route is a compiled route: its name, method and path pattern.
type route struct {
	name    string
	method  string
	pattern []segment // after "v1"
	path    string    // canonical path; complete when the route has no parameter
	params  bool
}

type segment struct {
	text  string // canonical fixed spelling, or the parameter's name
	param bool
}

// NewTable builds the table from routetable.Builtin() plus extra
// (routes.extra, docs/configuration.md). With unmatchedDeny, paths under /v1/
// that match no route are refused with 404 unknown_route instead of resolving
// to "unmatched".
//
// extra must have passed config.Validate, which is the one place the rules
// for routes live (names, methods, path grammar, one spelling per segment,
// no two routes with one method and path). The errors left are guards
// against input that skipped validation: a path outside /v1/, which the
// trie cannot hold, and a second route on or below the token endpoint's
// path, which would forward requests there (failing closed is the point).
func NewTable(extra []config.Route, unmatchedDeny bool) (*Table, error) {
	t := &Table{unmatchedDeny: unmatchedDeny, root: node{name: "v1"}}
	for i, r := range routetable.Builtin() {
		if err := t.add(r); err != nil {
			return nil, fmt.Errorf("built-in route %d: %w", i, err)
		}
	}
	for i, r := range extra {
		if err := t.add(routetable.Route(r)); err != nil {
			return nil, fmt.Errorf("routes.extra[%d]: %w", i, err)
		}
	}
	return t, nil
}

// add puts a validated route into the trie. Fixed segments are matched
// ignoring case, so a segment the table already has keeps its first
// spelling (validation refuses a second one).
func (t *Table) add(r routetable.Route) error {
	rest, ok := strings.CutPrefix(r.Path, "/v1/")
	if !ok {
		return fmt.Errorf("path %q is not under /v1/ (the configuration was not validated)", r.Path)
	}
	if r.Name != RouteAuth && ascii.EqualFold(rest, "auth") {
		return fmt.Errorf("path %q is the token endpoint's (the configuration was not validated)", r.Path)
	}
	if belowAuth(rest) {
		return fmt.Errorf("path %q is below the token endpoint (the configuration was not validated)", r.Path)
	}
	rt := route{name: r.Name, method: r.Method}
	n := &t.root
	for _, s := range strings.Split(rest, "/") {
		if name, ok := routetable.ParamName(s); ok {
			rt.pattern = append(rt.pattern, segment{text: name, param: true})
			rt.params = true
			if n.param == nil {
				n.param = &node{}
			}
			n = n.param
			continue
		}
		rt.pattern = append(rt.pattern, segment{text: s})
		next := n.child(s)
		if next == nil {
			next = &node{name: s}
			n.fixed = append(n.fixed, next)
		}
		n = next
	}
	// Parameter names may differ between routes sharing a prefix; the
	// canonical path is only used as is for routes without parameters.
	rt.path = r.Path
	n.routes = append(n.routes, rt)
	t.routes = append(t.routes, r)
	return nil
}

// child returns the fixed child whose name equals seg ignoring ASCII case.
// seg has been validated, so it is ASCII and EqualFold's Unicode folding
// (which would let the Kelvin sign match "k") never comes into play.
func (n *node) child(seg string) *node {
	for _, c := range n.fixed {
		if len(c.name) == len(seg) && ascii.EqualFold(c.name, seg) {
			return c
		}
	}
	return nil
}

// Routes lists every route, built-in ones first, then the extras in
// configuration order. The slice is a copy.
func (t *Table) Routes() []routetable.Route {
	return append([]routetable.Route(nil), t.routes...)
}

// HasRoute reports whether name is a route of the table or "unmatched".
func (t *Table) HasRoute(name string) bool {
	if name == RouteUnmatched {
		return true
	}
	for _, r := range t.routes {
		if r.Name == name {
			return true
		}
	}
	return false
}

// RouteNames returns every route name plus "unmatched".
func (t *Table) RouteNames() []string {
	names := make([]string, 0, len(t.routes)+1)
	for _, r := range t.routes {
		names = append(names, r.Name)
	}
	return append(names, RouteUnmatched)
}

// validSegment reports whether s matches [A-Za-z0-9_-]+, the only path
// segments the gateway forwards (docs/callers-and-policy.md).
func validSegment(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !segmentByte[s[i]] {
			return false
		}
	}
	return true
}

// segmentByte is routetable.IsSegmentByte ([A-Za-z0-9_-]) as a table for
// the hot path.
var segmentByte = func() (t [256]bool) {
	for c := range t {
		t[c] = routetable.IsSegmentByte(byte(c))
	}
	return t
}()

// Template returns the path template of the route named name
// ("/v1/esign_templates/{templateId}/fields"), or "" for "unmatched" and
// names of no route. It is for traces (docs/tracing.md: http.route), off the
// hot path: a linear scan.
func (t *Table) Template(name string) string {
	for _, r := range t.routes {
		if r.Name == name {
			return r.Path
		}
	}
	return ""
}
