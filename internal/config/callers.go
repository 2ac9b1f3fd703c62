package config

import (
	"errors"
	"net/netip"
)

// UnidentifiedCaller is the caller label of a request no caller matched; no
// caller may be named so.
const UnidentifiedCaller = "unidentified"

// errShortMapped is ParseCIDR's error for an IPv4-mapped prefix shorter
// than /96, which would reach beyond the mapped range.
var errShortMapped = errors.New("an IPv4-mapped prefix needs at least /96")

// ParseCIDR reads a CIDR of the configuration (callers.trusted_proxies,
// callers.list[].cidrs) as the gateway matches it: masked, and an
// IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) as the IPv4 prefix it means
// (10.0.0.0/8), because peer addresses are unmapped before they are
// matched. Validate reports every string it refuses, so the policy package
// can compile validated CIDRs with it and read them the same way.
func ParseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, errShortMapped
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
