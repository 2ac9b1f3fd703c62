package policy

import (
	"fmt"
	"strings"

	"github.com/faxgate/faxgate/internal/ascii"
	"github.com/faxgate/faxgate/internal/config"
)

// RouteUnmatched is the route name of a request under /v1/ that matches no
// route (contract section 3).
const RouteUnmatched = config.RouteUnmatched

// RouteAuth is the built-in route of the token endpoint, which the gateway
// owns and never forwards for a caller.
const RouteAuth = "auth"

// Table resolves request-targets to routes. It is immutable after
// construction and safe for concurrent use.
type Table struct {
	routes        []config.Route
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

// allowedMethods are contract section 5's methods; a route with any other
// method could never be reached.
var allowedMethods = map[string]bool{"GET": true, "POST": true, "PATCH": true, "PUT": true, "DELETE": true}

// NewTable builds the table from config.BuiltinRoutes() plus extra (contract
// section 2, routes.extra). With unmatchedDeny, paths under /v1/ that match
// no route are refused with 404 unknown_route instead of resolving to
// "unmatched".
//
// Extra routes must be spelled like the routes already in the table: a
// fixed segment that equals an existing one except for letter case is an
// error. Matching ignores case, so the table needs one canonical spelling
// per segment to forward; two spellings mean one of them is a typo that
// would only show as upstream 404s.
func NewTable(extra []config.Route, unmatchedDeny bool) (*Table, error) {
	t := &Table{unmatchedDeny: unmatchedDeny, root: node{name: "v1"}}
	names := map[string]bool{}
	for i, r := range config.BuiltinRoutes() {
		if err := t.add(r, names, true); err != nil {
			return nil, fmt.Errorf("built-in route %d: %w", i, err)
		}
	}
	for i, r := range extra {
		if err := t.add(r, names, false); err != nil {
			return nil, fmt.Errorf("routes.extra[%d]: %w", i, err)
		}
	}
	return t, nil
}

func (t *Table) add(r config.Route, names map[string]bool, builtin bool) error {
	if !validRouteName(r.Name) {
		return fmt.Errorf("name %q: want 1 to 63 of [a-z0-9._-]", r.Name)
	}
	if r.Name == RouteUnmatched || r.Name == config.RouteUnknown {
		return fmt.Errorf("name %q: reserved", r.Name)
	}
	if names[r.Name] {
		return fmt.Errorf("name %q: already used by another route", r.Name)
	}
	if !allowedMethods[r.Method] {
		return fmt.Errorf("method %q: want one of GET, POST, PATCH, PUT, DELETE", r.Method)
	}
	if !strings.HasPrefix(r.Path, "/v1/") {
		return fmt.Errorf("path %q: must start with /v1/", r.Path)
	}
	// Any other route on the auth path would be forwarded, and the key
	// exchange must never be reachable through the gateway.
	if !builtin && strings.EqualFold(strings.TrimSuffix(r.Path, "/"), "/v1/auth") {
		return fmt.Errorf("path %q: owned by the gateway", r.Path)
	}
	rt := route{name: r.Name, method: r.Method}
	n := &t.root
	params := map[string]bool{}
	for _, s := range strings.Split(r.Path[len("/v1/"):], "/") {
		switch {
		case len(s) > 2 && s[0] == '{' && s[len(s)-1] == '}' && validParamName(s[1:len(s)-1]):
			name := s[1 : len(s)-1]
			if params[name] {
				return fmt.Errorf("path %q: parameter {%s} appears twice", r.Path, name)
			}
			params[name] = true
			rt.pattern = append(rt.pattern, segment{text: name, param: true})
			rt.params = true
			if n.param == nil {
				n.param = &node{}
			}
			n = n.param
		case validSegment(s):
			rt.pattern = append(rt.pattern, segment{text: s})
			next := n.child(s)
			if next == nil {
				next = &node{name: s}
				n.fixed = append(n.fixed, next)
			} else if next.name != s {
				return fmt.Errorf("path %q: segment %q is spelled %q by another route", r.Path, s, next.name)
			}
			n = next
		default:
			return fmt.Errorf("path %q: segment %q: want [A-Za-z0-9_-]+ or {name}", r.Path, s)
		}
	}
	for _, other := range n.routes {
		if other.method == r.Method {
			return fmt.Errorf("%s %s: same method and path as route %q", r.Method, r.Path, other.name)
		}
	}
	// Parameter names may differ between routes sharing a prefix; the
	// canonical path is only used as is for routes without parameters.
	rt.path = r.Path
	n.routes = append(n.routes, rt)
	names[r.Name] = true
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
func (t *Table) Routes() []config.Route {
	return append([]config.Route(nil), t.routes...)
}

// hasRoute reports whether name is a route of the table or "unmatched".
func (t *Table) hasRoute(name string) bool {
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

// routeNames returns every route name plus "unmatched".
func (t *Table) routeNames() []string {
	names := make([]string, 0, len(t.routes)+1)
	for _, r := range t.routes {
		names = append(names, r.Name)
	}
	return append(names, RouteUnmatched)
}

// samePath groups route names that share one path (pattern), so that
// policy can insist that sensitivity, which follows the path, covers all of
// them.
func (t *Table) samePath() [][]string {
	var groups [][]string
	var walk func(n *node)
	walk = func(n *node) {
		if len(n.routes) > 1 {
			g := make([]string, len(n.routes))
			for i, r := range n.routes {
				g[i] = r.name
			}
			groups = append(groups, g)
		}
		for _, c := range n.fixed {
			walk(c)
		}
		if n.param != nil {
			walk(n.param)
		}
	}
	walk(&t.root)
	return groups
}

// validRouteName: route names are metric labels and allow-list entries, so
// they must not hold glob metacharacters or anything a label should not.
func validRouteName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func validParamName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return len(s) > 0
}

// validSegment reports whether s matches [A-Za-z0-9_-]+, the only path
// segments the gateway forwards (contract section 3).
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

// segmentByte is the set [A-Za-z0-9_-], as a table for the hot path.
var segmentByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['_'], t['-'] = true, true
	return t
}()
