package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/faxgate/faxgate/policy/routetable"
)

// validateRoutes checks routes: the unmatched policy and routes.extra.
func (v *validator) validateRoutes(r Routes) {
	v.oneOf("routes.unmatched", r.Unmatched, "allow", "deny")
	builtin := map[string]bool{}
	// shapes maps a route shape to the path of the name of the route that
	// has it ("" for a built-in) and that name.
	type owner struct{ path, name string }
	shapes := map[string]owner{}
	spelled := spellings{}
	for _, b := range routetable.Builtin() {
		builtin[b.Name] = true
		shapes[routeShape(b.Method, b.Path)] = owner{"", b.Name}
		spelled.add(b.Path, "", b.Name)
	}
	names := map[string]int{}
	for i, e := range r.Extra {
		p := fmt.Sprintf("routes.extra[%d]", i)
		np, mp, pp := p+".name", p+".method", p+".path"
		switch j, dup := names[e.Name]; {
		case e.Name == "":
			v.add(np, "required")
		case len(e.Name) > 63:
			v.add(np, "route name %s is longer than 63 characters", v.q(np, e.Name))
		case !routeNameRE.MatchString(e.Name):
			v.add(np, "invalid route name %s (want lower-case words of a-z, 0-9 or _ joined by dots, e.g. \"faxes.send\")", v.q(np, e.Name))
		case builtin[e.Name]:
			v.add(np, "%s is a built-in route name", v.q(np, e.Name))
		case e.Name == routetable.Unmatched || e.Name == routetable.Unknown:
			v.add(np, "%s is reserved", v.q(np, e.Name))
		case dup:
			v.add(np, "duplicate route name %s (also routes.extra[%d])", v.q(np, e.Name), j)
		default:
			names[e.Name] = i
		}
		methodOK := false
		switch {
		case e.Method == "":
			v.add(mp, "required")
		case !routetable.IsMethod(e.Method):
			v.add(mp, "invalid method %s (want %s)", v.q(mp, e.Method), orList(routetable.Methods()))
		default:
			methodOK = true
		}
		switch {
		case e.Path == "":
			v.add(pp, "required")
		case !validRoutePath(e.Path):
			v.add(pp, "invalid path %s (want /v1/ then segments of letters, digits, _ or -, or {param})", v.q(pp, e.Path))
		case strings.EqualFold(e.Path, "/v1/auth"):
			v.add(pp, "%s is owned by the gateway", v.q(pp, e.Path))
		case belowAuth(e.Path):
			// The proxy refuses every request there with 403 auth_managed
			// (docs/security.md), so such a route could never be
			// reached: refusing it tells the operator now, not a caller later.
			v.add(pp, "%s is below /v1/auth, which is owned by the gateway", v.q(pp, e.Path))
		case repeatedParam(e.Path):
			v.add(pp, "%s uses a parameter name twice", v.q(pp, e.Path))
		default:
			if o, bad := spelled.conflict(e.Path); bad {
				v.add(pp, "%s spells a segment differently from route %s; routes must share one spelling",
					v.q(pp, e.Path), v.q(o.namePath, o.name))
				continue
			}
			spelled.add(e.Path, np, e.Name)
			if !methodOK {
				continue
			}
			shape := routeShape(e.Method, e.Path)
			if o, taken := shapes[shape]; taken {
				v.add(pp, "%s with method %s is already route %s", v.q(pp, e.Path), v.q(mp, e.Method), v.q(o.path, o.name))
				continue
			}
			shapes[shape] = owner{np, e.Name}
		}
	}
}

// routeNames returns the names of the built-in routes and of c's extra
// routes, in table order.
func routeNames(extra []Route) []string {
	var names []string
	for _, r := range routetable.Builtin() {
		names = append(names, r.Name)
	}
	for _, r := range extra {
		names = append(names, r.Name)
	}
	return names
}

var routeNameRE = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*$`)

// validRoutePath reports whether p is /v1/ followed by one or more segments,
// each [A-Za-z0-9_-]+ or a parameter {name} with a name of [A-Za-z0-9_]+.
func validRoutePath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/v1/")
	if !ok {
		return false
	}
	for _, seg := range strings.Split(rest, "/") {
		if name, ok := routetable.ParamName(seg); ok {
			for i := 0; i < len(name); i++ {
				if c := name[i]; c == '-' || !routetable.IsSegmentByte(c) {
					return false
				}
			}
			if name == "" {
				return false
			}
			continue
		}
		if seg == "" {
			return false
		}
		for i := 0; i < len(seg); i++ {
			if !routetable.IsSegmentByte(seg[i]) {
				return false
			}
		}
	}
	return true
}

// belowAuth reports whether the route path p (valid, so under /v1/) lies
// below the token endpoint: "auth" in any letter case, then more segments.
// A parameter in that place ("/v1/{a}/x") is not below it: it matches other
// paths too, and the proxy refuses the /v1/auth/... ones before any route
// is matched.
func belowAuth(p string) bool {
	rest := strings.TrimPrefix(p, "/v1/")
	seg, _, deeper := strings.Cut(rest, "/")
	return deeper && strings.EqualFold(seg, "auth")
}

// repeatedParam reports whether a parameter name appears twice in path.
func repeatedParam(path string) bool {
	seen := map[string]bool{}
	for _, seg := range strings.Split(path, "/") {
		if name, ok := routetable.ParamName(seg); ok {
			if seen[name] {
				return true
			}
			seen[name] = true
		}
	}
	return false
}

// routeShape is what two routes must not share: the method and the path,
// compared without letter case (as the router matches) and without
// parameter names.
func routeShape(method, path string) string {
	segs := strings.Split(strings.ToLower(path), "/")
	for i, s := range segs {
		if _, ok := routetable.ParamName(s); ok {
			segs[i] = "{}"
		}
	}
	return method + " " + strings.Join(segs, "/")
}

// spellings records the spelling of each fixed path segment of the route
// table, keyed by the lower-cased path up to it. Matching ignores case, so
// the router keeps one spelling per segment to forward; a second spelling
// is a typo that would only show as upstream 404s.
type spellings map[string]spelling

type spelling struct{ text, namePath, name string }

// conflict returns the route that spells a segment of path differently.
func (sp spellings) conflict(path string) (spelling, bool) {
	for _, kv := range fixedSegments(path) {
		if s, ok := sp[kv[0]]; ok && s.text != kv[1] {
			return s, true
		}
	}
	return spelling{}, false
}

func (sp spellings) add(path, namePath, name string) {
	for _, kv := range fixedSegments(path) {
		if _, ok := sp[kv[0]]; !ok {
			sp[kv[0]] = spelling{kv[1], namePath, name}
		}
	}
}

// fixedSegments returns the key and spelling of each fixed segment of path,
// in order.
func fixedSegments(path string) [][2]string {
	var out [][2]string
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		if _, ok := routetable.ParamName(seg); ok || seg == "" {
			continue
		}
		out = append(out, [2]string{routeShape("", strings.Join(segs[:i+1], "/")), seg})
	}
	return out
}
