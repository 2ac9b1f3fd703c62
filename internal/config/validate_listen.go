package config

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The listeners of one file must not share an address: serve would fail to
// bind the second one with "address already in use" after check had said
// the file was fine. What conflicts is what net.Listen("tcp", addr) does on
// Linux (TestSameListenerAgreesWithTheKernel binds every case the machine
// running it has addresses for):
//
//   - an IPv4-mapped IPv6 address is the IPv4 one: net.Listen opens an IPv4
//     socket for [::ffff:127.0.0.1], so it conflicts with 127.0.0.1;
//   - an unspecified host ("", 0.0.0.0, [::], [::ffff:0.0.0.0]) is one
//     dual-stack socket (net.Listen clears IPV6_V6ONLY for every one of
//     them) and takes its port on every address of both families;
//   - otherwise two addresses conflict only when they are equal:
//     127.0.0.1 and 127.0.0.2 do not, nor do 127.0.0.1 and [::1] (two
//     families), nor link-local addresses of two interfaces (the kernel
//     binds each to its interface);
//   - a host name binds the first IPv4 address it resolves to, else its
//     first address. localhost is taken as 127.0.0.1 here (RFC 6761 makes
//     it the loopback, and net.Listen prefers its IPv4 address); any other
//     name is only known by resolving it, which CheckEnvironment does.
//
// Port 0 asks for a free port, and never conflicts.

// listener is a listener address of the file and its YAML path.
type listener struct{ path, addr string }

// serverListeners are the listeners of the server section serve binds, in
// file order: server.listen, and server.tls.acme.http_listen when set in
// mode acme (outside it the key is refused, and nothing listens on it).
func serverListeners(s Server) []listener {
	ls := []listener{{"server.listen", s.Listen}}
	if s.TLS.Mode == "acme" && s.TLS.ACME.HTTPListen != "" {
		ls = append(ls, listener{"server.tls.acme.http_listen", s.TLS.ACME.HTTPListen})
	}
	return ls
}

// listeners are every listener of c serve binds, in file order.
func listeners(c *Config) []listener {
	return append(serverListeners(c.Server), listener{"admin.listen", c.Admin.Listen})
}

// listen checks a listener address: host:port with a numeric port.
func (v *validator) listen(path, addr string) {
	if addr == "" {
		v.add(path, "required")
		return
	}
	if _, _, ok := splitAddr(addr, 0); !ok {
		v.add(path, "invalid address %s (want host:port, port 0-65535)", v.q(path, addr))
	}
}

// ownAddress reports l at its path for each earlier listener it would share
// an address with.
func (v *validator) ownAddress(l listener, earlier []listener) {
	for _, e := range earlier {
		if sameListener(l.addr, e.addr) {
			v.sharedAddress(l, e, "")
		}
	}
}

// sharedAddress adds the problem of l, which uses the address of the
// earlier listener e; how, when set, says why in parentheses.
func (v *validator) sharedAddress(l, e listener, how string) {
	why := "two listeners cannot share an address"
	if l.path == "admin.listen" && e.path == "server.listen" {
		why = "the admin endpoints are never on the proxy listener"
	}
	if how != "" {
		how = " (" + how + ")"
	}
	v.add(l.path, "%s uses the address of %s %s%s; %s", v.q(l.path, l.addr), e.path, v.q(e.path, e.addr), how, why)
}

// bindAddr is where a listener address binds.
type bindAddr struct {
	// any: an unspecified host, which takes the port on every address.
	any bool
	// ip is the address otherwise, unmapped, with a zone only where the
	// kernel heeds one (link-local); invalid for a host name.
	ip netip.Addr
	// name is a host name other than localhost, in lower case.
	name string
	port int
}

// parseBind parses a listener address as net.Listen reads it; ok is false
// for an address listen refuses.
func parseBind(addr string) (b bindAddr, ok bool) {
	host, port, ok := splitAddr(addr, 0)
	if !ok {
		return bindAddr{}, false
	}
	b.port = port
	if host == "" {
		b.any = true
		return b, true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return b.at(ip), true
	}
	if strings.EqualFold(host, "localhost") {
		return b.at(netip.AddrFrom4([4]byte{127, 0, 0, 1})), true
	}
	b.name = strings.ToLower(host)
	return b, true
}

// at is b bound to ip.
func (b bindAddr) at(ip netip.Addr) bindAddr {
	ip = ip.Unmap()
	if !ip.IsLinkLocalUnicast() {
		ip = ip.WithZone("")
	}
	b.any, b.ip, b.name = ip.IsUnspecified(), ip, ""
	return b
}

// conflicts reports whether binding a and b would fail. Two different host
// names, or a name and an address, are not known to conflict until the
// names are resolved.
func (a bindAddr) conflicts(b bindAddr) bool {
	switch {
	case a.port != b.port || a.port == 0:
		return false
	case a.any || b.any:
		return true
	case a.ip.IsValid() && b.ip.IsValid():
		return a.ip == b.ip
	default:
		return a.name != "" && a.name == b.name
	}
}

// sameListener reports whether listening on a and on b would conflict, as
// far as can be told without resolving a host name.
func sameListener(a, b string) bool {
	ba, aok := parseBind(a)
	bb, bok := parseBind(b)
	return aok && bok && ba.conflicts(bb)
}

// resolveTimeout bounds the lookup of one listener host name.
const resolveTimeout = 5 * time.Second

// resolvedListeners reports the pairs of listeners that share an address
// once their host names are resolved as net.Listen resolves them, and that
// Validate could not see (server.listen "gw-1:8080" beside admin.listen
// "10.0.0.5:8080", where gw-1 is 10.0.0.5). A name that does not resolve is
// left to serve's own error: check reports what it can know.
func (v *validator) resolvedListeners(ls []listener) {
	lookup := v.lookupHost
	if lookup == nil {
		lookup = net.DefaultResolver.LookupNetIP
	}
	type resolved struct {
		ip netip.Addr
		ok bool
	}
	cache := map[string]resolved{}
	resolve := func(b bindAddr) (bindAddr, bool) {
		if b.name == "" {
			return b, true
		}
		r, done := cache[b.name]
		if !done {
			ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
			ips, err := lookup(ctx, "ip", b.name)
			cancel()
			if err == nil && len(ips) > 0 {
				r = resolved{ips[0], true}
				for _, ip := range ips { // net.Listen's choice: the first IPv4 address
					if ip.Unmap().Is4() {
						r.ip = ip
						break
					}
				}
			}
			cache[b.name] = r
		}
		return b.at(r.ip), r.ok
	}
	for i, l := range ls {
		lb, ok := parseBind(l.addr)
		if !ok {
			continue
		}
		for _, e := range ls[:i] {
			eb, ok := parseBind(e.addr)
			if !ok || lb.port != eb.port || lb.port == 0 || lb.conflicts(eb) || lb.name == "" && eb.name == "" {
				continue // Validate's to report, or no conflict whatever the names are
			}
			lr, lok := resolve(lb)
			er, eok := resolve(eb)
			if !lok || !eok || !lr.conflicts(er) {
				continue
			}
			// The host is not quoted: it may have come from ${NAME}.
			var how []string
			for _, s := range []struct {
				named bool
				r     bindAddr
				path  string
			}{{lb.name != "", lr, l.path}, {eb.name != "", er, e.path}} {
				if s.named {
					how = append(how, fmt.Sprintf("the host of %s resolves to %s", s.path, s.r.ip))
				}
			}
			v.sharedAddress(l, e, strings.Join(how, ", "))
		}
	}
}

// splitAddr splits host:port; the host may be empty, an IP address or a
// host name, the port a number from minPort to 65535.
func splitAddr(addr string, minPort int) (host string, port int, ok bool) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil || ps == "" || len(ps) > 5 {
		return "", 0, false
	}
	for i := 0; i < len(ps); i++ {
		if ps[i] < '0' || ps[i] > '9' {
			return "", 0, false
		}
	}
	port, _ = strconv.Atoi(ps)
	if port < minPort || port > 65535 || !validBindHost(host) {
		return "", 0, false
	}
	return host, port, true
}

// validBindHost reports whether h, the host of a listen address, is an IP
// address or made of the bytes of a host name (letters, digits, "." and
// "-"); "" is valid (every address).
func validBindHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c != '.' && c != '-' && !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}
