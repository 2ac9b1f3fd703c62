// Package identity names the caller of a request (docs/callers-and-policy.md):
// a verified client certificate's SPIFFE ID, then, from a trusted proxy, the
// X-Forwarded-Client-Cert URI or the identity header, then the peer's
// address, then callers.unidentified.
package identity

import (
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
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

// Identifier names callers (docs/callers-and-policy.md). It is immutable and
// safe for concurrent use.
type Identifier struct {
	spiffe    map[string]string // SPIFFE ID -> caller
	headerVal map[string]string // identity header value -> caller
	header    string            // canonical identity header name; "" = none
	trusted   prefixTable       // value: "" (only membership counts)
	cidrs     prefixTable       // value: the caller
	fallback  string            // callers.unidentified unless "deny"
	deny      bool
}

// prefixTable finds the longest prefix containing an address in one map
// lookup per distinct prefix length, not a scan of every prefix: 2,000
// callers' CIDRs cost what a few do.
type prefixTable struct {
	lengths []int // distinct prefix lengths, longest first
	m       map[netip.Prefix]string
}

func (t *prefixTable) add(p netip.Prefix, v string) {
	if t.m == nil {
		t.m = map[netip.Prefix]string{}
	}
	p = p.Masked()
	if _, dup := t.m[p]; !dup && !slices.Contains(t.lengths, p.Bits()) {
		t.lengths = append(t.lengths, p.Bits())
		// Longest first, so the first hit is the most specific prefix: a
		// /32 for one host inside another caller's /16 wins.
		sort.Sort(sort.Reverse(sort.IntSlice(t.lengths)))
	}
	t.m[p] = v
}

// lookup returns the value of the longest prefix containing a.
func (t *prefixTable) lookup(a netip.Addr) (string, bool) {
	for _, b := range t.lengths {
		if b > a.BitLen() {
			continue
		}
		p, err := a.Prefix(b)
		if err != nil {
			continue
		}
		if v, ok := t.m[p]; ok {
			return v, true
		}
	}
	return "", false
}

// New compiles callers, which must have passed config.Validate:
// that is the one place the rules for them live (caller names, SPIFFE IDs,
// header values, and no identifier given to two callers). CIDRs are read by
// config.ParseCIDR, as validation read them; the only error is its guard
// against a CIDR validated input never has.
func New(c config.Callers) (*Identifier, error) {
	id := &Identifier{
		spiffe:    map[string]string{},
		headerVal: map[string]string{},
	}
	if c.IdentityHeader != "" {
		id.header = textproto.CanonicalMIMEHeaderKey(c.IdentityHeader)
	}
	for i, s := range c.TrustedProxies {
		p, err := config.ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("callers.trusted_proxies[%d]: invalid CIDR %q (the configuration was not validated)", i, s)
		}
		id.trusted.add(p, "")
	}
	for i, cl := range c.List {
		for _, s := range cl.SpiffeIDs {
			id.spiffe[s] = cl.Name
		}
		for _, s := range cl.HeaderValues {
			id.headerVal[s] = cl.Name
		}
		for j, s := range cl.CIDRs {
			p, err := config.ParseCIDR(s)
			if err != nil {
				return nil, fmt.Errorf("callers.list[%d].cidrs[%d]: invalid CIDR %q (the configuration was not validated)", i, j, s)
			}
			id.cidrs.add(p, cl.Name)
		}
	}
	// The zero value means deny, like the default, so a Callers built in
	// code without Unidentified never lets everyone in.
	if u := c.Unidentified; u == "deny" || u == "" {
		id.deny = true
	} else {
		id.fallback = u
	}
	return id, nil
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
		if name, ok := id.cidrs.lookup(addr); ok {
			return name, ByCIDR, true
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
	return id.oneCaller(uriSANs(r.TLS.VerifiedChains[0][0]))
}

// oidSubjectAltName is the subjectAltName extension (RFC 5280, 4.2.1.6).
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// uriSANs returns a certificate's URI SANs as the certificate spells them.
// x509.Certificate.URIs went through url.Parse, which lowercases the
// scheme (and String re-encodes): "SPIFFE://td/x" would come back as
// "spiffe://td/x" and match a SPIFFE ID it does not spell. SPIFFE IDs are
// compared as strings, exactly, as XFCC URIs are.
func uriSANs(cert *x509.Certificate) []string {
	var out []string
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var seq asn1.RawValue
		if rest, err := asn1.Unmarshal(ext.Value, &seq); err != nil || len(rest) > 0 || !seq.IsCompound || seq.Tag != asn1.TagSequence {
			return nil // x509 parsed it, so this cannot happen; believe nothing if it does
		}
		for data := seq.Bytes; len(data) > 0; {
			var v asn1.RawValue
			var err error
			if data, err = asn1.Unmarshal(data, &v); err != nil {
				return nil
			}
			const uniformResourceIdentifier = 6 // GeneralName [6] IA5String
			if v.Class == asn1.ClassContextSpecific && v.Tag == uniformResourceIdentifier {
				out = append(out, string(v.Bytes))
			}
		}
	}
	return out
}

// oneCaller matches the URI SANs of one certificate. Several URIs naming
// different callers are not believed: the certificate does not say who it is.
func (id *Identifier) oneCaller(uris []string) (string, bool) {
	found := ""
	for _, u := range uris {
		name, ok := id.spiffe[u]
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
	_, ok := id.trusted.lookup(a)
	return ok
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
