package config

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strings"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy/routetable"
)

// callerNameRE is what a caller name may be: it is a metric label value.
var callerNameRE = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)

// reservedHeaders are the headers callers.identity_header cannot be
// (docs/callers-and-policy.md, docs/security.md): every header the gateway
// strips (routetable.StrippedRequestHeaders, and every name starting with
// routetable.StrippedRequestPrefix), which would never arrive, and the
// headers it sets or interprets itself, whose use it would collide with.
// Names are canonical.
var reservedHeaders = func() map[string]bool {
	m := map[string]bool{}
	for _, h := range routetable.StrippedRequestHeaders() {
		m[h] = true
	}
	for _, h := range []string{
		"Host", "Set-Cookie", "X-Request-Id", "Expect",
		"Content-Length", "Content-Type", "Content-Encoding",
		"Traceparent", "Tracestate",
	} {
		m[h] = true
	}
	return m
}()

// validateCallers checks callers: the identity header, the trusted
// proxies and each caller of the list; mtls says whether client certificates
// are verified (server.tls.client_ca_file), so that SPIFFE IDs can match.
func (v *validator) validateCallers(c Callers, extra []Route, mtls bool) {
	const hp = "callers.identity_header"
	// Folded as the forward reads names: X_Auth_Token is X-Auth-Token to a
	// CGI-style server, and the gateway strips it in every spelling.
	switch canon := routetable.FoldedHeaderName(c.IdentityHeader); {
	case c.IdentityHeader == "":
		v.add(hp, "required")
	case !ascii.IsToken(c.IdentityHeader):
		v.add(hp, "invalid header name %s", v.q(hp, c.IdentityHeader))
	case reservedHeaders[canon] || strings.HasPrefix(canon, routetable.StrippedRequestPrefix):
		v.add(hp, "%s cannot be used: the gateway strips or sets it itself", v.q(hp, c.IdentityHeader))
	}
	for i, s := range c.TrustedProxies {
		v.cidr(fmt.Sprintf("callers.trusted_proxies[%d]", i), s)
	}

	// names maps each caller name to the index of its first use.
	names := map[string]int{}
	for i, cl := range c.List {
		if _, dup := names[cl.Name]; !dup {
			names[cl.Name] = i
		}
	}
	const up = "callers.unidentified"
	if _, ok := names[c.Unidentified]; !ok && c.Unidentified != "deny" {
		v.add(up, "%s is neither \"deny\" nor the name of a caller in callers.list", v.q(up, c.Unidentified))
	}

	known := append(routeNames(extra), routetable.Unmatched)
	// Each identifier may name one caller only; first maps it to the path
	// where it was first seen and the index of that caller.
	type seen struct {
		path   string
		caller int
	}
	first := map[string]seen{}
	claim := func(kind, key, path, value string, caller int) {
		if key == "" {
			return
		}
		k := kind + " " + key
		s, dup := first[k]
		switch {
		case !dup:
			first[k] = seen{path, caller}
		case s.caller == caller:
			v.add(path, "%s is listed twice (also %s)", v.q(path, value), s.path)
		default:
			other := c.List[s.caller].Name
			v.add(path, "%s also identifies caller %s (%s); the identity would be ambiguous",
				v.q(path, value), v.q(fmt.Sprintf("callers.list[%d].name", s.caller), other), s.path)
		}
	}
	for i, cl := range c.List {
		p := fmt.Sprintf("callers.list[%d]", i)
		np := p + ".name"
		switch j := names[cl.Name]; {
		case cl.Name == "":
			v.add(np, "required")
		case !callerNameRE.MatchString(cl.Name):
			v.add(np, "invalid name %s (want 1 to 63 of a-z, 0-9 and -)", v.q(np, cl.Name))
		case cl.Name == UnidentifiedCaller || cl.Name == "deny":
			v.add(np, "%s is reserved", v.q(np, cl.Name))
		case j != i:
			v.add(np, "duplicate caller name %s (also callers.list[%d])", v.q(np, cl.Name), j)
		}
		for j, s := range cl.CIDRs {
			cp := fmt.Sprintf("%s.cidrs[%d]", p, j)
			claim("cidr", v.cidr(cp, s), cp, s, i)
		}
		for j, s := range cl.SpiffeIDs {
			sp := fmt.Sprintf("%s.spiffe_ids[%d]", p, j)
			if !validSpiffeID(s) {
				v.add(sp, "invalid SPIFFE ID %s (want spiffe://trust-domain/path)", v.q(sp, s))
				continue
			}
			claim("spiffe", s, sp, s, i)
		}
		for j, s := range cl.HeaderValues {
			hp := fmt.Sprintf("%s.header_values[%d]", p, j)
			switch {
			case s == "":
				v.add(hp, "must not be empty")
			case !validHeaderValue(s):
				v.add(hp, "invalid header value %s (no control characters or surrounding spaces)", v.q(hp, s))
			default:
				claim("header", s, hp, s, i)
			}
		}
		// SPIFFE IDs reach the gateway in a verified client certificate
		// (server.tls.client_ca_file) or through a trusted proxy; header
		// values only through a trusted proxy.
		if len(c.TrustedProxies) == 0 {
			if len(cl.SpiffeIDs) > 0 && !mtls {
				v.add(p+".spiffe_ids", "never matched: no server.tls.client_ca_file verifies client certificates, and X-Forwarded-Client-Cert is believed only from callers.trusted_proxies, which is empty")
			}
			if len(cl.HeaderValues) > 0 {
				v.add(p+".header_values", "never matched: callers.identity_header is believed only from callers.trusted_proxies, which is empty")
			}
		}
		if len(cl.CIDRs)+len(cl.SpiffeIDs)+len(cl.HeaderValues) == 0 && (cl.Name == "" || cl.Name != c.Unidentified) {
			v.add(p, "caller %s can never match: it has no cidrs, spiffe_ids or header_values and is not callers.unidentified",
				v.q(p+".name", cl.Name))
		}
		for j, a := range cl.Allow {
			v.allow(fmt.Sprintf("%s.allow[%d]", p, j), a, known)
		}
		if cl.RateLimit != nil {
			v.limit(p+".rate_limit", *cl.RateLimit)
		}
	}
}

// allow checks an allow entry: "*", a route name, or a path.Match glob over
// route names, which must match at least one known route.
func (v *validator) allow(p, pattern string, known []string) {
	if pattern == "" {
		v.add(p, "must not be empty")
		return
	}
	if _, err := path.Match(pattern, ""); err != nil {
		v.add(p, "invalid pattern %s", v.q(p, pattern))
		return
	}
	if !v.matchesRoute(pattern, known) {
		v.add(p, "%s matches no route", v.q(p, pattern))
	}
}

// matchesRoute reports whether pattern matches a name in known (always the
// same list in one validation), remembering the answer: thousands of callers
// share a few patterns, and a reload must stay fast.
func (v *validator) matchesRoute(pattern string, known []string) bool {
	if ok, seen := v.patterns[pattern]; seen {
		return ok
	}
	ok := false
	for _, n := range known {
		if m, _ := path.Match(pattern, n); m {
			ok = true
			break
		}
	}
	if v.patterns == nil {
		v.patterns = make(map[string]bool)
	}
	v.patterns[pattern] = ok
	return ok
}

// cidr checks a CIDR at path and returns its canonical form, as ParseCIDR
// reads it ("" when invalid), so that two spellings of one prefix are seen
// as one. A bare address is refused rather than read as /32 or /128: a
// missing prefix length is more often a typo than a single host.
func (v *validator) cidr(path, s string) string {
	pfx, err := ParseCIDR(s)
	switch {
	case errors.Is(err, errShortMapped):
		v.add(path, "invalid CIDR %s (%v)", v.q(path, s), err)
	case err == nil:
		return pfx.String()
	default:
		if _, aerr := netip.ParseAddr(s); aerr == nil {
			v.add(path, "invalid CIDR %s (a single address needs /32 or /128)", v.q(path, s))
		} else {
			v.add(path, "invalid CIDR %s", v.q(path, s))
		}
	}
	return ""
}

// validHeaderValue reports whether s can arrive as a header value unchanged:
// no control characters, and no surrounding white space (HTTP strips it).
func validHeaderValue(s string) bool {
	if strings.TrimSpace(s) != s {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// validSpiffeID reports whether s is spiffe://trust-domain[/path], with the
// character sets of the SPIFFE ID specification, so that it can be compared
// byte for byte with a certificate's URI SAN.
func validSpiffeID(s string) bool {
	rest, ok := strings.CutPrefix(s, "spiffe://")
	if !ok {
		return false
	}
	td, p, hasPath := strings.Cut(rest, "/")
	if td == "" {
		return false
	}
	for i := 0; i < len(td); i++ {
		c := td[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	if !hasPath {
		return true
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(routetable.IsSegmentByte(c) || c == '.') {
				return false
			}
		}
	}
	return true
}
