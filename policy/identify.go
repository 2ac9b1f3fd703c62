package policy

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"sort"
	"strings"

	"github.com/faxgate/faxgate/internal/config"
)

// How a caller was identified, as returned by Identify.
const (
	ByMTLS    = "mtls"
	ByXFCC    = "xfcc"
	ByHeader  = "header"
	ByCIDR    = "cidr"
	ByDefault = "default"
)

// xfccHeader is the canonical form of X-Forwarded-Client-Cert.
const xfccHeader = "X-Forwarded-Client-Cert"

// Identifier names callers (contract section 4). It is immutable and safe
// for concurrent use.
type Identifier struct {
	spiffe    map[string]string // SPIFFE ID -> caller
	headerVal map[string]string // identity header value -> caller
	header    string            // canonical identity header name; "" = none
	trusted   []netip.Prefix
	cidrs     []callerPrefix // most specific first
	fallback  string         // callers.unidentified unless "deny"
	deny      bool
}

type callerPrefix struct {
	prefix netip.Prefix
	caller string
}

// NewIdentifier compiles callers. It refuses what would make identity
// ambiguous: one SPIFFE ID, header value or CIDR given to two callers.
func NewIdentifier(c config.Callers) (*Identifier, error) {
	id := &Identifier{
		spiffe:    map[string]string{},
		headerVal: map[string]string{},
	}
	if c.IdentityHeader != "" {
		id.header = textproto.CanonicalMIMEHeaderKey(c.IdentityHeader)
	}
	for i, s := range c.TrustedProxies {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("callers.trusted_proxies[%d]: invalid CIDR %q", i, s)
		}
		id.trusted = append(id.trusted, p)
	}
	names := map[string]bool{}
	seenPrefix := map[netip.Prefix]string{}
	for i, cl := range c.List {
		if !validCallerName(cl.Name) {
			return nil, fmt.Errorf("callers.list[%d].name: %q does not match [a-z0-9-]{1,63}", i, cl.Name)
		}
		if names[cl.Name] {
			return nil, fmt.Errorf("callers.list[%d].name: duplicate caller %q", i, cl.Name)
		}
		names[cl.Name] = true
		for j, s := range cl.SpiffeIDs {
			if other, dup := id.spiffe[s]; dup {
				return nil, fmt.Errorf("callers.list[%d].spiffe_ids[%d]: also a SPIFFE ID of caller %q", i, j, other)
			}
			id.spiffe[s] = cl.Name
		}
		for j, s := range cl.HeaderValues {
			if s == "" || strings.TrimSpace(s) != s {
				return nil, fmt.Errorf("callers.list[%d].header_values[%d]: empty or with surrounding blanks", i, j)
			}
			if other, dup := id.headerVal[s]; dup {
				return nil, fmt.Errorf("callers.list[%d].header_values[%d]: also a header value of caller %q", i, j, other)
			}
			id.headerVal[s] = cl.Name
		}
		for j, s := range cl.CIDRs {
			p, err := parsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("callers.list[%d].cidrs[%d]: invalid CIDR %q", i, j, s)
			}
			if other, dup := seenPrefix[p]; dup {
				return nil, fmt.Errorf("callers.list[%d].cidrs[%d]: %s is also a CIDR of caller %q", i, j, p, other)
			}
			seenPrefix[p] = cl.Name
			id.cidrs = append(id.cidrs, callerPrefix{p, cl.Name})
		}
	}
	// Most specific first, so that the first containing prefix is the
	// longest match: a /32 for one host inside another caller's /16 wins.
	sort.SliceStable(id.cidrs, func(a, b int) bool {
		return id.cidrs[a].prefix.Bits() > id.cidrs[b].prefix.Bits()
	})
	switch u := c.Unidentified; {
	case u == "deny" || u == "":
		id.deny = true
	case names[u]:
		id.fallback = u
	default:
		return nil, fmt.Errorf("callers.unidentified: %q is neither deny nor a caller in callers.list", u)
	}
	return id, nil
}

// parsePrefix parses a CIDR and masks it; an IPv4-mapped IPv6 prefix becomes
// the IPv4 prefix it means, because peer addresses are unmapped before they
// are matched.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("IPv4-mapped prefix shorter than /96")
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Identify returns the caller's name and how it was identified (ByMTLS,
// ByXFCC, ByHeader, ByCIDR or ByDefault), or ok=false when no caller
// matched and callers.unidentified is "deny". The first step that names a
// caller wins:
//
//  1. a verified client certificate whose URI SAN is a caller's SPIFFE ID;
//  2. from a peer in trusted_proxies only: the URI of the last
//     X-Forwarded-Client-Cert element (the one the nearest proxy added; the
//     ones before it came from further away and may have been forged),
//     then the identity header. This trusts the proxy to replace or strip
//     both headers when its own client sent them (Envoy's SANITIZE_SET, not
//     APPEND_FORWARD, for a client without a certificate);
//  3. the peer address in a caller's CIDRs, most specific first;
//  4. callers.unidentified.
func (id *Identifier) Identify(r *http.Request) (name, how string, ok bool) {
	if name, ok := id.fromCert(r); ok {
		return name, ByMTLS, true
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	addr := peer.Addr().Unmap().WithZone("")
	if err == nil && id.isTrusted(addr) {
		if name, ok := id.fromXFCC(r.Header[xfccHeader]); ok {
			return name, ByXFCC, true
		}
		if name, ok := id.fromHeader(r); ok {
			return name, ByHeader, true
		}
	}
	if err == nil {
		for _, c := range id.cidrs {
			if c.prefix.Contains(addr) {
				return c.caller, ByCIDR, true
			}
		}
	}
	if id.deny {
		return "", "", false
	}
	return id.fallback, ByDefault, true
}

// fromCert only believes certificates the TLS stack verified: with
// tls.RequestClientCert, PeerCertificates can hold anything a client sent.
func (id *Identifier) fromCert(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", false
	}
	return id.oneCaller(r.TLS.VerifiedChains[0][0].URIs)
}

// oneCaller matches the URI SANs of one certificate. Several URIs naming
// different callers are not believed: the certificate does not say who it is.
func (id *Identifier) oneCaller(uris []*url.URL) (string, bool) {
	found := ""
	for _, u := range uris {
		name, ok := id.spiffe[u.String()]
		if !ok {
			continue
		}
		if found != "" && found != name {
			return "", false
		}
		found = name
	}
	return found, found != ""
}

func (id *Identifier) isTrusted(a netip.Addr) bool {
	for _, p := range id.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fromXFCC uses the last element only. Header lines are joined with ","
// as RFC 9110 allows; a malformed header is ignored as a whole, never
// half-believed.
func (id *Identifier) fromXFCC(lines []string) (string, bool) {
	if len(lines) == 0 || len(id.spiffe) == 0 {
		return "", false
	}
	els, err := ParseXFCC(strings.Join(lines, ","))
	if err != nil || len(els) == 0 {
		return "", false
	}
	name, ok := id.spiffe[els[len(els)-1].URI]
	return name, ok
}

// fromHeader believes exactly one identity header line: with several, a
// client's own value may sit beside the trusted proxy's, and which one an
// intermediary keeps is anyone's guess. Only optional whitespace (space and
// tab, RFC 9110) is trimmed.
func (id *Identifier) fromHeader(r *http.Request) (string, bool) {
	if id.header == "" {
		return "", false
	}
	vals := r.Header[id.header]
	if len(vals) != 1 {
		return "", false
	}
	name, ok := id.headerVal[strings.Trim(vals[0], " \t")]
	return name, ok
}

// validCallerName is contract section 2's [a-z0-9-]{1,63}: names become
// metric labels.
func validCallerName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
