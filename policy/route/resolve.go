package route

import (
	"strings"

	"github.com/faxgate/faxgate/internal/base/ascii"
)

// Target is a resolved request-target.
type Target struct {
	// Route is the route name ("contacts.list", "auth", an extra's name) or
	// "unmatched".
	Route string
	// Path is the exact path to send upstream: fixed segments in the
	// table's canonical spelling, parameter segments as the caller sent
	// them. For "unmatched" it is the caller's path with the "/v1" prefix in
	// lower case and one trailing slash removed.
	Path string
	// RawQuery is forwarded unchanged (and never logged).
	RawQuery string
	// MethodOK is false when the path is a route's path but no route with
	// this path has the request's method. Route then still names a route of
	// that path, because sensitivity follows the path, not the method: the
	// proxy applies the route's policy first and answers 405 after.
	MethodOK bool
}

// Resolve resolves the raw request-target (r.RequestURI, exactly as it was
// on the wire) of a request with the given method, which the caller has
// already checked to be a token.
//
// It works on the raw bytes and never on r.URL.Path, which Go has already
// percent-decoded: a decoded path is not the path the upstream receives.
// Anything ambiguous is refused with 400 invalid_path rather than cleaned,
// so that the route decided on here is the route the upstream serves.
//
// Every path below the token endpoint (/v1/auth/x, any case, any depth) is
// refused with 403 auth_managed, for every method, whatever routes.unmatched
// says and whatever route's parameters would match it: see belowAuth.
//
// The proxy resolves through Resolver.Resolve, which also refuses unmatched
// paths below a sensitive route's path; Table.Resolve knows no policy.
func (t *Table) Resolve(method, requestURI string) (Target, *Error) {
	tgt, err := t.resolve(method, requestURI)
	if err == nil && tgt.Route == RouteUnmatched && t.unmatchedDeny {
		return Target{}, unknownRoute("no route for this path")
	}
	return tgt, err
}

// resolve is Resolve without routes.unmatched: deny, so that Resolver.Resolve
// can refuse a path below a sensitive route with 403 whatever that setting.
func (t *Table) resolve(method, requestURI string) (Target, *Error) {
	if requestURI == "" {
		return Target{}, unknownRoute("empty request-target")
	}
	if requestURI[0] != '/' {
		if requestURI == "*" {
			return Target{}, invalidPath("asterisk-form request-target is not accepted")
		}
		// Absolute-form (http://host/path) and authority-form (host:port)
		// name a host of their own; the gateway only ever serves its own.
		return Target{}, invalidPath("request-target must be a path starting with /")
	}
	// A fragment is never sent by a conforming client, and proxies disagree
	// about where it ends.
	if strings.IndexByte(requestURI, '#') >= 0 {
		return Target{}, invalidPath("request-target contains a fragment (#)")
	}
	p, q, _ := strings.Cut(requestURI, "?")
	if p == "/" {
		return Target{}, unknownRoute("no route for this path")
	}
	// One trailing slash is ignored; a second one is an empty segment and
	// refused below.
	if p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	if e := checkPath(p); e != nil {
		return Target{}, e
	}
	if e := checkQuery(q); e != nil {
		return Target{}, e
	}

	// p is now "/" followed by valid segments joined by single slashes.
	first, rest, more := strings.Cut(p[1:], "/")
	if !ascii.EqualFold(first, "v1") {
		return Target{}, unknownRoute("path is not under /v1/")
	}
	if more && belowAuth(rest) {
		return Target{}, authManaged("paths below /v1/auth belong to the gateway's token endpoint and are never forwarded")
	}
	if more {
		if leaf := match(&t.root, rest); leaf != nil {
			rt := &leaf.routes[0]
			ok := false
			for i := range leaf.routes {
				if leaf.routes[i].method == method {
					rt, ok = &leaf.routes[i], true
					break
				}
			}
			return Target{Route: rt.name, Path: rt.build(p), RawQuery: q, MethodOK: ok}, nil
		}
	}
	if !strings.HasPrefix(p, "/v1") {
		p = "/v1" + p[len("/v1"):]
	}
	return Target{Route: RouteUnmatched, Path: p, RawQuery: q, MethodOK: true}, nil
}

// belowAuth reports whether rest (a validated path after "/v1/", without
// its trailing slash) lies below the token endpoint: "auth" in any letter
// case, then at least one more segment.
//
// The subtree is the gateway's, like /v1/auth itself (docs/security.md):
// the vendor may serve undocumented token operations there (revoke,
// refresh, introspect), and forwarding one as "unmatched", or through an
// extra route with a parameter where "auth" stands (/v1/{a}/{b}), would let
// every caller act on the tenant's credentials with the gateway's token. It
// is checked before any route is matched, so that no configuration can
// reach it, and refused whatever policy.auth_endpoint says: the shim only
// ever answers POST /v1/auth.
func belowAuth(rest string) bool {
	seg, _, deeper := strings.Cut(rest, "/")
	return deeper && ascii.EqualFold(seg, "auth")
}

// match finds the node of the route path that rest (the path after "/v1/",
// without a trailing slash) matches. A fixed segment beats a parameter at
// the same position; if the fixed branch leads nowhere the parameter branch
// is tried, so a request matches a route whenever one fits.
func match(n *node, rest string) *node {
	seg, tail, more := strings.Cut(rest, "/")
	if c := n.child(seg); c != nil {
		if !more {
			if len(c.routes) > 0 {
				return c
			}
		} else if leaf := match(c, tail); leaf != nil {
			return leaf
		}
	}
	if c := n.param; c != nil {
		if !more {
			if len(c.routes) > 0 {
				return c
			}
		} else if leaf := match(c, tail); leaf != nil {
			return leaf
		}
	}
	return nil
}

// build returns the path to forward for the request path p (validated, no
// trailing slash) that matched rt: the table's spelling of every fixed
// segment and the caller's bytes for every parameter.
func (rt *route) build(p string) string {
	if !rt.params {
		return rt.path
	}
	var b strings.Builder
	// Fixed segments only differ in case, so the result is as long as p.
	b.Grow(len(p))
	b.WriteString("/v1")
	rest := p[len("/v1/"):]
	for _, s := range rt.pattern {
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		b.WriteByte('/')
		if s.param {
			b.WriteString(seg)
		} else {
			b.WriteString(s.text)
		}
	}
	return b.String()
}

// checkPath refuses every path that some server or proxy could read
// differently from the gateway (docs/callers-and-policy.md): what policy
// checks must be what the upstream acts on. p starts with "/" and
// has had one trailing slash removed.
func checkPath(p string) *Error {
	start := 1 // start of the current segment
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if !segmentByte[p[i]] {
				return badPathByte(p, start, i)
			}
			continue
		}
		if i == start {
			// "//" is read as a scheme-relative URL by some and collapsed by
			// others.
			return invalidPath("path contains an empty segment (//)")
		}
		start = i + 1
	}
	return nil
}

// badPathByte explains why p[i] (in the segment starting at start) is
// refused, without echoing the path.
func badPathByte(p string, start, i int) *Error {
	c := p[i]
	switch {
	case c == '%':
		return invalidPath("path contains a percent-encoding")
	case c == '\\':
		return invalidPath("path contains a backslash")
	case c == ';':
		return invalidPath("path contains a ; parameter")
	case c < 0x20 || c == 0x7f:
		return invalidPath("path contains a control byte")
	case c >= 0x80:
		return invalidPath("path contains a non-ASCII byte")
	}
	end := strings.IndexByte(p[start:], '/')
	if end < 0 {
		end = len(p) - start
	}
	if seg := p[start : start+end]; seg == "." || seg == ".." {
		return invalidPath("path contains a dot segment")
	}
	return invalidPath("path segment outside [A-Za-z0-9_-]")
}

// checkQuery refuses queries that cannot be forwarded unchanged and the
// _method parameter that some frameworks read as a method override.
func checkQuery(q string) *Error {
	start := 0
	for i := 0; i <= len(q); i++ {
		if i < len(q) {
			c := q[i]
			// A space or control byte could split the request line
			// upstream; a non-ASCII byte is not a URI character at all.
			if c <= ' ' || c >= 0x7f {
				return invalidRequest("query contains a space, control or non-ASCII byte")
			}
			// ";" separates parameters for some frameworks, "&" for all.
			if c != '&' && c != ';' {
				continue
			}
		}
		key := q[start:i]
		if eq := strings.IndexByte(key, '='); eq >= 0 {
			key = key[:eq]
		}
		if methodOverrideKey(key) {
			return invalidRequest("query parameter _method is not accepted")
		}
		start = i + 1
	}
	return nil
}

// methodOverrideKey reports whether a framework could read the raw query
// key as "_method". It decodes the way lenient stacks do: percent-decoding
// (more than once, for stacks that decode twice), "+" as space, PHP's
// mangling of " " and "." to "_", array suffixes ("_method[]"), NUL
// truncation, surrounding blanks and letter case.
func methodOverrideKey(key string) bool {
	// Fast path without allocation: a key that is not percent-encoded can
	// only become "_method" if it already contains the word.
	if strings.IndexByte(key, '%') < 0 && !containsFoldASCII(key, "method") {
		return false
	}
	s := key
	for range 4 {
		d := unescapeLenient(s)
		if d == s {
			break
		}
		s = d
	}
	if i := strings.IndexAny(s, "[\x00"); i >= 0 {
		s = s[:i]
	}
	// PHP trims leading blanks and then turns " " and "." into "_"; other
	// stacks do not trim. Either reading is refused.
	return mangledIsMethod(s) || mangledIsMethod(strings.Trim(s, " \t\r\n\v\f"))
}

func mangledIsMethod(s string) bool {
	if len(s) != len("_method") {
		return false
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'A' <= c && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c == ' ' || c == '.':
			b[i] = '_'
		}
	}
	return string(b) == "_method"
}

// unescapeLenient percent-decodes s and turns "+" into a space; a "%" not
// followed by two hex digits is kept, as lenient decoders do.
func unescapeLenient(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func containsFoldASCII(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if ascii.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
