package config

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"syscall"
	"testing"
)

// sameListenerCases are pairs of listener addresses and whether serve could
// bind both. TestSameListenerAgreesWithTheKernel binds each pair whose
// addresses this machine has, with the ports replaced by a free one.
var sameListenerCases = []struct {
	a, b string
	want bool
}{
	// The report that opened this: an IPv4-mapped address is the IPv4 one.
	{"[::ffff:127.0.0.1]:8080", "127.0.0.1:8080", true},
	{"[::ffff:7f00:1]:8080", "127.0.0.1:8080", true},
	{"[::ffff:127.0.0.1]:8080", "[::ffff:127.0.0.1]:8080", true},
	{"[::ffff:127.0.0.2]:8080", "127.0.0.1:8080", false},

	// Unspecified hosts, in every spelling, take the port on every address
	// of both families (net.Listen opens them dual-stack).
	{":8080", "127.0.0.1:8080", true},
	{"0.0.0.0:8080", "127.0.0.1:8080", true},
	{"[::]:8080", "127.0.0.1:8080", true},
	{"[::ffff:0.0.0.0]:8080", "127.0.0.1:8080", true},
	{"[0:0:0:0:0:0:0:0]:8080", "127.0.0.2:8080", true},
	{"0.0.0.0:8080", "[::1]:8080", true},
	{"[::]:8080", "[::1]:8080", true},
	{":8080", "[::]:8080", true},
	{"0.0.0.0:8080", "[::ffff:0.0.0.0]:8080", true},
	{"[::%lo]:8080", "127.0.0.1:8080", true},
	{":8080", "localhost:8080", true},
	{":8080", "gw.internal:8080", true},

	// Loopback spellings: localhost binds 127.0.0.1 (the first IPv4 address
	// it resolves to), never [::1].
	{"localhost:8080", "127.0.0.1:8080", true},
	{"LocalHost:8080", "[::ffff:127.0.0.1]:8080", true},
	{"localhost:8080", "LOCALHOST:8080", true},
	{"localhost:8080", "[::1]:8080", false},
	{"localhost:8080", "127.0.0.2:8080", false},
	{"[::1]:8080", "127.0.0.1:8080", false}, // two families
	{"[::1]:8080", "[0:0:0:0:0:0:0:1]:8080", true},
	{"[::1%lo]:8080", "[::1]:8080", true}, // a zone on a global address is ignored
	{"127.0.0.1:8080", "127.0.0.2:8080", false},

	// Link-local addresses are per interface.
	{"[fe80::1%eth0]:8080", "[fe80::1%eth0]:8080", true},
	{"[fe80::1%eth0]:8080", "[fe80::1%eth1]:8080", false},

	// Host names: the same name is the same address; two names, or a name
	// and an address, need resolving (CheckEnvironment).
	{"gw.internal:8080", "GW.internal:8080", true},
	{"gw.internal:8080", "10.0.0.5:8080", false},
	{"gw-1:8080", "gw-2:8080", false},

	// Ports: 0 is any free port; a leading zero is the same port.
	{":0", ":0", false},
	{"127.0.0.1:0", "127.0.0.1:0", false},
	{"127.0.0.1:08080", "127.0.0.1:8080", true},
	{"127.0.0.1:8080", "127.0.0.1:8081", false},
	{":8080", ":9090", false},

	// An address listen refuses conflicts with nothing (it has its own
	// problem).
	{"nope", ":8080", false},
	{"127.0.0.1:http", "127.0.0.1:http", false},
}

func TestSameListener(t *testing.T) {
	for _, tc := range sameListenerCases {
		for _, ab := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
			if got := sameListener(ab[0], ab[1]); got != tc.want {
				t.Errorf("sameListener(%q, %q) = %v, want %v", ab[0], ab[1], got, tc.want)
			}
		}
	}
}

// TestSameListenerAgreesWithTheKernel binds each pair of sameListenerCases
// as faxgate serve does (net.Listen "tcp"), on one free port, and checks
// that the second bind fails exactly when sameListener says they conflict.
// A pair with a host name other than localhost, or with an address this
// machine cannot bind alone (no IPv6, no such interface), is left out.
func TestSameListenerAgreesWithTheKernel(t *testing.T) {
	checked := 0
	for _, tc := range sameListenerCases {
		ah, ap, aok := splitAddr(tc.a, 0)
		bh, bp, bok := splitAddr(tc.b, 0)
		if !aok || !bok || ap != bp || ap == 0 {
			continue // not about addresses
		}
		if pa, _ := parseBind(tc.a); pa.name != "" {
			continue // no DNS in tests
		}
		if pb, _ := parseBind(tc.b); pb.name != "" {
			continue
		}
		t.Run(tc.a+" "+tc.b, func(t *testing.T) {
			// A pair that must not conflict is tried on up to five ports:
			// another process may hold the second address's port by chance
			// (tests run beside each other), never on five in a row.
			var conflict bool
			var port string
			for range 5 {
				first, err := net.Listen("tcp", net.JoinHostPort(ah, "0"))
				if err != nil {
					t.Skipf("cannot listen on %s here: %v", ah, err)
				}
				port = strconv.Itoa(first.Addr().(*net.TCPAddr).Port)
				second, err := net.Listen("tcp", net.JoinHostPort(bh, port))
				conflict = errors.Is(err, syscall.EADDRINUSE)
				first.Close()
				if err == nil {
					second.Close()
				} else if !conflict {
					t.Skipf("cannot listen on %s here: %v", bh, err)
				}
				if conflict == tc.want {
					break
				}
			}
			checked++
			if conflict != tc.want {
				t.Errorf("binding %s then %s on port %s: address in use = %v, but sameListener says %v",
					ah, bh, port, conflict, tc.want)
			}
		})
	}
	if checked < 15 {
		t.Errorf("only %d pairs could be bound here, want at least 15", checked)
	}
}

// TestValidateListeners: every pair of the file's listeners is compared,
// each conflict reported at the later listener in file order.
func TestValidateListeners(t *testing.T) {
	acme := func(c *Config, httpListen string) {
		c.Server.TLS.Mode = "acme"
		c.Server.TLS.ACME.Domains = []string{"gw.example.com"}
		c.Server.TLS.ACME.HTTPListen = httpListen
	}
	for _, tc := range []struct {
		name   string
		modify func(c *Config)
		want   []string
	}{
		{"mapped admin on the proxy address", func(c *Config) {
			c.Server.Listen, c.Admin.Listen = "127.0.0.1:8080", "[::ffff:127.0.0.1]:8080"
		}, []string{`admin.listen: "[::ffff:127.0.0.1]:8080" uses the address of server.listen "127.0.0.1:8080"; the admin endpoints are never on the proxy listener`}},
		{"mapped unspecified proxy", func(c *Config) {
			c.Server.Listen, c.Admin.Listen = "[::ffff:0.0.0.0]:9090", "localhost:9090"
		}, []string{`admin.listen: "localhost:9090" uses the address of server.listen "[::ffff:0.0.0.0]:9090"; the admin endpoints are never on the proxy listener`}},
		{"loopback of two families", func(c *Config) { c.Server.Listen, c.Admin.Listen = "[::1]:8080", "127.0.0.1:8080" }, nil},
		{"http-01 on the proxy address", func(c *Config) {
			c.Server.Listen = "[::]:443"
			acme(c, "0.0.0.0:443")
		}, []string{`server.tls.acme.http_listen: "0.0.0.0:443" uses the address of server.listen "[::]:443"; two listeners cannot share an address`}},
		{"admin on the http-01 address", func(c *Config) {
			c.Server.Listen, c.Admin.Listen = ":443", "127.0.0.1:80"
			acme(c, ":80")
		}, []string{`admin.listen: "127.0.0.1:80" uses the address of server.tls.acme.http_listen ":80"; two listeners cannot share an address`}},
		{"all three on one address", func(c *Config) {
			c.Server.Listen, c.Admin.Listen = "127.0.0.1:8443", "localhost:8443"
			acme(c, "[::ffff:127.0.0.1]:8443")
		}, []string{
			`server.tls.acme.http_listen: "[::ffff:127.0.0.1]:8443" uses the address of server.listen "127.0.0.1:8443"; two listeners cannot share an address`,
			`admin.listen: "localhost:8443" uses the address of server.listen "127.0.0.1:8443"; the admin endpoints are never on the proxy listener`,
			`admin.listen: "localhost:8443" uses the address of server.tls.acme.http_listen "[::ffff:127.0.0.1]:8443"; two listeners cannot share an address`,
		}},
		{"three addresses", func(c *Config) {
			c.Server.Listen, c.Admin.Listen = ":443", "127.0.0.1:9090"
			acme(c, ":80")
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.modify(c)
			var got []string
			for _, p := range Validate(c) {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems:\n%q\nwant:\n%q", got, tc.want)
			}
		})
	}
}

// TestResolvedListeners: CheckEnvironment resolves listener host names as
// net.Listen does (the first IPv4 address, else the first) and reports the
// conflicts Validate cannot see, only for listeners that share a port.
func TestResolvedListeners(t *testing.T) {
	hosts := map[string][]string{
		"gw-1":      {"10.0.0.5"},
		"gw-2":      {"10.0.0.6"},
		"dual":      {"::1", "10.0.0.5"}, // listen binds 10.0.0.5
		"v6":        {"::1"},
		"mapped":    {"::ffff:10.0.0.5"},
		"nowhere":   {"0.0.0.0"},
		"gw-1-also": {"10.0.0.5"},
	}
	var looked []string
	lookup := func(_ context.Context, network, host string) ([]netip.Addr, error) {
		if network != "ip" {
			return nil, fmt.Errorf("network %q", network)
		}
		looked = append(looked, host)
		var ips []netip.Addr
		for _, s := range hosts[host] {
			ips = append(ips, netip.MustParseAddr(s))
		}
		if len(ips) == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return ips, nil
	}
	for _, tc := range []struct {
		name          string
		server, admin string
		want          []string
		lookups       int
	}{
		{"name and its address", "10.0.0.5:8080", "gw-1:8080",
			[]string{`admin.listen: "gw-1:8080" uses the address of server.listen "10.0.0.5:8080" (the host of admin.listen resolves to 10.0.0.5); the admin endpoints are never on the proxy listener`}, 1},
		{"two names of one address", "gw-1:8080", "gw-1-also:8080",
			[]string{`admin.listen: "gw-1-also:8080" uses the address of server.listen "gw-1:8080" (the host of admin.listen resolves to 10.0.0.5, the host of server.listen resolves to 10.0.0.5); the admin endpoints are never on the proxy listener`}, 2},
		{"first IPv4 address", "dual:8080", "[::ffff:10.0.0.5]:8080",
			[]string{`admin.listen: "[::ffff:10.0.0.5]:8080" uses the address of server.listen "dual:8080" (the host of server.listen resolves to 10.0.0.5); the admin endpoints are never on the proxy listener`}, 1},
		{"mapped answer", "mapped:8080", "10.0.0.5:8080",
			[]string{`admin.listen: "10.0.0.5:8080" uses the address of server.listen "mapped:8080" (the host of server.listen resolves to 10.0.0.5); the admin endpoints are never on the proxy listener`}, 1},
		{"unspecified answer", "nowhere:8080", "127.0.0.1:8080",
			[]string{`admin.listen: "127.0.0.1:8080" uses the address of server.listen "nowhere:8080" (the host of server.listen resolves to 0.0.0.0); the admin endpoints are never on the proxy listener`}, 1},
		{"IPv6 name beside IPv4 loopback", "v6:8080", "127.0.0.1:8080", nil, 1},
		{"two addresses", "gw-1:8080", "gw-2:8080", nil, 2},
		{"other ports are not looked up", "gw-1:8080", "gw-1-also:9090", nil, 0},
		{"port 0 is not looked up", "gw-1:0", "gw-1-also:0", nil, 0},
		{"Validate's conflicts are not repeated", ":8080", "gw-1:8080", nil, 0},
		{"same name is Validate's", "gw-1:8080", "GW-1:8080", nil, 0},
		{"addresses only are Validate's", "10.0.0.5:8080", "10.0.0.6:8080", nil, 0},
		{"a name that does not resolve is serve's to report", "unknown:8080", "10.0.0.5:8080", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			looked = nil
			c := validConfig()
			c.Upstream.APIKeyFile = ""
			c.Upstream.APIKeyEnv = "KEY"
			c.Server.Listen, c.Admin.Listen = tc.server, tc.admin
			v := &validator{lookupHost: lookup}
			v.environment(c, func(string) (string, bool) { return "k", true })
			var got []string
			for _, p := range v.problems {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems:\n%q\nwant:\n%q", got, tc.want)
			}
			if len(looked) != tc.lookups {
				t.Errorf("looked up %q, want %d lookups", looked, tc.lookups)
			}
		})
	}
}
