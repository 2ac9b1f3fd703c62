package policy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy/routetable"
)

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
func (r *Rules) Resolve(method, requestURI string) (Target, *Error) {
	tgt, err := r.Table.resolve(method, requestURI)
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
	if r.Table.unmatchedDeny {
		return Target{}, unknownRoute("no route for this path")
	}
	return tgt, nil
}

// Base returns what policy says about route whoever calls: Sensitive and
// Confirm as configured, Allowed false. The proxy uses it to audit a request
// to a sensitive route before (and whether or not) the caller is known.
func (p *Policy) Base(route string) Decision {
	if i, ok := p.index[route]; ok {
		return p.base[i]
	}
	return Decision{}
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

// newSensitivePaths collects the paths of t's routes that p makes sensitive.
func newSensitivePaths(t *Table, p *Policy) *sensitivePaths {
	root := &sensitivePaths{}
	for _, rt := range t.Routes() {
		if !p.Base(rt.Name).Sensitive {
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
func newShadows(t *Table, p *Policy) map[string][]sensitivePattern {
	routes := t.Routes()
	var sens []sensitivePattern
	for _, rt := range routes {
		if p.Base(rt.Name).Sensitive {
			sens = append(sens, sensitivePattern{route: rt.Name, path: rt.Path, segs: splitPattern(rt.Path)})
		}
	}
	var out map[string][]sensitivePattern
	for _, rt := range routes {
		if p.Base(rt.Name).Sensitive {
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

// AuditIDs reads number_id and order_id from body for the audit line, as
// leniently as a security review needs: whenever body starts as a readable
// JSON object, whether or not CheckConfirm would accept it. Values that are
// JSON strings or numbers are returned as their text; a key that appears
// more than once with different values yields every distinct value, joined
// by commas, because a denied request that tried to be ambiguous is exactly
// what the reader of the audit log must see. Reading stops at the first
// malformed byte, keeping what came before.
func AuditIDs(body []byte) (numberID, orderID string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", ""
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case json.Number:
			s = x.String()
		default:
			continue
		}
		switch key {
		case "number_id":
			numberID = addDistinct(numberID, s)
		case "order_id":
			orderID = addDistinct(orderID, s)
		}
	}
	return numberID, orderID
}

func addDistinct(list, v string) string {
	if list == "" {
		return v
	}
	for _, x := range strings.Split(list, ",") {
		if x == v {
			return list
		}
	}
	return list + "," + v
}
