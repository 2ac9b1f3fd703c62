package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func validConfig() *Config {
	c := Default()
	c.Upstream.BaseURL = "https://api.example.com/"
	c.Upstream.APIKeyFile = "/run/secrets/api-key"
	return &c
}

func TestValidateValid(t *testing.T) {
	if ps := Validate(validConfig()); ps != nil {
		t.Errorf("Validate(valid) = %v, want nil", ps)
	}
}

func TestValidateNil(t *testing.T) {
	if ps := Validate(nil); len(ps) != 1 {
		t.Errorf("Validate(nil) = %v, want one problem", ps)
	}
}

// TestValidatePure checks that Validate neither changes its argument nor
// depends on anything but it.
func TestValidatePure(t *testing.T) {
	c := validConfig()
	c.Callers.List = []Caller{{Name: "a", CIDRs: []string{"10.0.0.1/8"}, RateLimit: &Limit{}}}
	c.Server.Listen = "nope"
	before := *c
	before.Callers.List = append([]Caller(nil), c.Callers.List...)
	first := Validate(c)
	if !reflect.DeepEqual(*c, before) {
		t.Errorf("Validate changed its argument")
	}
	if second := Validate(c); !reflect.DeepEqual(first, second) {
		t.Errorf("Validate is not deterministic: %v then %v", first, second)
	}
}

// TestValidateMessages covers cases that are easier to build in Go than in
// YAML, with the formatted (not file) values in messages.
func TestValidateMessages(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(c *Config)
		want   []string
	}{
		{"zero durations", func(c *Config) { c.Server.IdleTimeout = 0; c.Token.RetryMax = -time.Second },
			[]string{`server.idle_timeout: must be greater than 0, got "0s"`,
				`token.retry_max: must be greater than 0, got "-1s"`,
				`token.retry_min: "1s" is greater than token.retry_max "-1s"`}},
		{"refresh before lifetime", func(c *Config) { c.Token.RefreshBefore = 25 * time.Hour },
			[]string{`token.refresh_before: must be less than the 24h token lifetime (a token is renewed this long before it expires), got "25h0m0s"`}},
		{"admin on proxy port", func(c *Config) { c.Server.Listen = ":9090"; c.Admin.Listen = "127.0.0.1:9090" },
			[]string{`admin.listen: "127.0.0.1:9090" uses the address of server.listen ":9090"; the admin endpoints are never on the proxy listener`}},
		{"port 0 never conflicts", func(c *Config) { c.Server.Listen = ":0"; c.Admin.Listen = ":0" }, nil},
		{"different hosts", func(c *Config) { c.Server.Listen = "10.0.0.1:80"; c.Admin.Listen = "127.0.0.1:80" }, nil},
		{"ipv6 listen", func(c *Config) { c.Server.Listen = "[::]:8080"; c.Admin.Listen = "[::1]:9090" }, nil},
		{"base url with path and trailing slash", func(c *Config) { c.Upstream.BaseURL = "http://up:8080/api/" }, nil},
		{"base url relative", func(c *Config) { c.Upstream.BaseURL = "/v1" },
			[]string{`upstream.base_url: "/v1" is not an absolute http or https URL`}},
		{"base url without host", func(c *Config) { c.Upstream.BaseURL = "https:///v1" },
			[]string{`upstream.base_url: "https:///v1" has no host`}},
		{"base url opaque with credentials", func(c *Config) { c.Upstream.BaseURL = "https:u:p@host" },
			[]string{`upstream.base_url: the URL has no host`}},
		{"api key env name", func(c *Config) { c.Upstream.APIKeyFile = ""; c.Upstream.APIKeyEnv = "api-key" },
			[]string{`upstream.api_key_env: invalid environment variable name "api-key"`}},
		{"tls files", func(c *Config) {
			c.Server.TLS = TLS{Mode: "files", MinVersion: "1.3", CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "require", ACME: ACME{Storage: "file"}}
			c.Callers.List = []Caller{{Name: "a", SpiffeIDs: []string{"spiffe://t/a"}}}
		}, nil},
		{"tls files without its files", func(c *Config) { c.Server.TLS.Mode = "files" },
			[]string{`server.tls.cert_file: required with server.tls.mode "files"`, `server.tls.key_file: required with server.tls.mode "files"`}},
		{"tls bad versions and client auth", func(c *Config) {
			c.Server.TLS.MinVersion, c.Server.TLS.ClientAuth = "1.1", "request"
		}, []string{`server.tls.min_version: invalid value "1.1" (want 1.2 or 1.3)`,
			`server.tls.client_auth: invalid value "request" (want optional or require)`}},
		{"tls off with a client ca", func(c *Config) { c.Server.TLS.ClientCAFile = "ca"; c.Server.TLS.ClientAuth = "require" },
			[]string{`server.tls.client_ca_file: needs server.tls.mode "files" or "acme"`}},
		{"require without a client ca", func(c *Config) {
			c.Server.TLS = TLS{Mode: "files", MinVersion: "1.2", CertFile: "c", KeyFile: "k", ClientAuth: "require", ACME: ACME{Storage: "file"}}
		}, []string{`server.tls.client_auth: "require" needs server.tls.client_ca_file to verify certificates against`}},
		{"acme keys outside mode acme", func(c *Config) {
			c.Server.TLS = TLS{Mode: "files", MinVersion: "1.2", CertFile: "c", KeyFile: "k", ClientAuth: "optional",
				ACME: ACME{Email: "a@example.com", Directory: "https://ca.internal/dir", CARootFile: "r", Storage: "redis", StoragePath: "p", HTTPListen: ":80"}}
		}, []string{
			`server.tls.acme.email: only used with server.tls.mode "acme"`,
			`server.tls.acme.directory: only used with server.tls.mode "acme"`,
			`server.tls.acme.ca_root_file: only used with server.tls.mode "acme"`,
			`server.tls.acme.storage: only used with server.tls.mode "acme"`,
			`server.tls.acme.storage_path: only used with server.tls.mode "acme"`,
			`server.tls.acme.http_listen: only used with server.tls.mode "acme"`}},
		{"min version 1.3 with tls off", func(c *Config) { c.Server.TLS.MinVersion = "1.3" },
			[]string{`server.tls.min_version: needs server.tls.mode "files" or "acme"`}},
		{"acme without domains", func(c *Config) { c.Server.TLS.Mode = "acme" },
			[]string{`server.tls.acme.domains: required with server.tls.mode "acme"`}},
		{"acme bad domains, directory, http listen", func(c *Config) {
			c.Server.TLS.Mode = "acme"
			c.Server.TLS.ACME.Domains = []string{"ok.example.com", "*.example.com", "10.0.0.1", "-x.example", "OK.example.com"}
			c.Server.TLS.ACME.Directory = "http://ca.internal/directory"
			c.Server.TLS.ACME.HTTPListen = "80"
		}, []string{
			`server.tls.acme.domains[1]: invalid DNS name "*.example.com" (want a host name such as api.example.com; no wildcard, no IP address)`,
			`server.tls.acme.domains[2]: invalid DNS name "10.0.0.1" (want a host name such as api.example.com; no wildcard, no IP address)`,
			`server.tls.acme.domains[3]: invalid DNS name "-x.example" (want a host name such as api.example.com; no wildcard, no IP address)`,
			`server.tls.acme.domains[4]: duplicate domain "OK.example.com"`,
			`server.tls.acme.directory: invalid ACME directory URL "http://ca.internal/directory" (want https://host/path, or empty for the public default CA)`,
			`server.tls.acme.http_listen: invalid address "80" (want host:port, port 0-65535)`}},
		{"acme storage redis with a storage path", func(c *Config) {
			c.Server.TLS.Mode = "acme"
			c.Server.TLS.ACME.Domains = []string{"gw.example.com"}
			c.Server.TLS.ACME.Storage = "redis"
			c.Server.TLS.ACME.StoragePath = "/var/lib/faxgate"
		}, []string{`server.tls.acme.storage_path: only used with server.tls.acme.storage "file"`}},
		{"acme valid", func(c *Config) {
			c.Server.TLS.Mode = "acme"
			c.Server.TLS.ACME.Domains = []string{"gw.example.com", "localhost"}
			c.Server.TLS.ACME.Directory = "https://ca.internal:14000/dir"
			c.Server.TLS.ACME.HTTPListen = ":80"
		}, nil},
		{"blank files", func(c *Config) { c.Upstream.APIKeyFile = " "; c.Upstream.CAFile = "\t" },
			[]string{`upstream.api_key_file: must not be blank`, `upstream.ca_file: must not be blank`}},
		{"unidentified names a caller", func(c *Config) {
			c.Callers.Unidentified = "guest"
			c.Callers.List = []Caller{{Name: "guest", Allow: []string{"contacts.list"}}}
		}, nil},
		{"fixed path of a sensitive parameter route", func(c *Config) {
			c.Routes.Extra = []Route{
				{Name: "faxes.remove", Method: "DELETE", Path: "/v1/faxes/{faxId}"},
				{Name: "faxes.inbox.clear", Method: "DELETE", Path: "/v1/faxes/inbox"},
				{Name: "faxes.list", Method: "GET", Path: "/v1/faxes"},
				{Name: "faxes.pages", Method: "GET", Path: "/v1/faxes/{faxId}/pages"},
				{Name: "generic.pair", Method: "PUT", Path: "/v1/{a}/{b}"},
			}
			c.Policy.Sensitive = []string{"numbers.delete", "faxes.remove"}
		}, []string{`routes.extra[1].path: "/v1/faxes/inbox" names paths of sensitive route "faxes.remove", so route "faxes.inbox.clear" must be in policy.sensitive too (sensitivity follows the path, not the method)`}},
		{"caller rate limit", func(c *Config) {
			c.Callers.List = []Caller{{Name: "a", CIDRs: []string{"::1/128"}, RateLimit: &Limit{RPS: 0.5, Burst: 1}}}
		}, nil},
		{"same cidr, different spelling", func(c *Config) {
			c.Callers.List = []Caller{{Name: "a", CIDRs: []string{"10.0.0.0/8"}}, {Name: "b", CIDRs: []string{"10.1.2.3/8"}}}
		}, []string{`callers.list[1].cidrs[0]: "10.1.2.3/8" also identifies caller "a" (callers.list[0].cidrs[0]); the identity would be ambiguous`}},
		{"sensitive extra route", func(c *Config) {
			c.Routes.Extra = []Route{{Name: "faxes.delete", Method: "DELETE", Path: "/v1/faxes/{faxId}"}}
			c.Policy.Sensitive = append(c.Policy.Sensitive, "faxes.delete")
			c.Policy.Confirm = nil
		}, nil},
		{"extra route same path other method", func(c *Config) {
			c.Routes.Extra = []Route{{Name: "contacts.get", Method: "GET", Path: "/v1/contacts/list"}}
		}, nil},
		// Issue 8: these passed check, then serve refused to start.
		{"sensitive path shared with a route that is not sensitive", func(c *Config) {
			c.Routes.Extra = []Route{{Name: "numbers.peek", Method: "GET", Path: "/v1/numbers/delete"}}
		}, []string{`routes.extra[0].path: "/v1/numbers/delete" is the path of sensitive route "numbers.delete", so route "numbers.peek" must be in policy.sensitive too (sensitivity follows the path, not the method)`}},
		{"sensitive path shared, other spelling of the parameter", func(c *Config) {
			c.Routes.Extra = []Route{{Name: "faxes.delete", Method: "DELETE", Path: "/v1/faxes/{faxId}"},
				{Name: "faxes.get", Method: "GET", Path: "/v1/faxes/{id}"}}
			c.Policy.Sensitive = []string{"faxes.delete"}
		}, []string{`routes.extra[1].path: "/v1/faxes/{id}" is the path of sensitive route "faxes.delete", so route "faxes.get" must be in policy.sensitive too (sensitivity follows the path, not the method)`}},
		{"sensitive path shared, both sensitive", func(c *Config) {
			c.Routes.Extra = []Route{{Name: "numbers.peek", Method: "GET", Path: "/v1/numbers/delete"}}
			c.Policy.Sensitive = []string{"numbers.delete", "numbers.peek"}
		}, nil},
		{"built-in route on a sensitive extra's path", func(c *Config) {
			c.Routes.Extra = []Route{{Name: "contacts.peek", Method: "GET", Path: "/v1/contacts/list"}}
			c.Policy.Sensitive = []string{"contacts.peek"}
			c.Policy.Confirm = nil
		}, []string{`policy.sensitive[0]: built-in route "contacts.list" shares the path of sensitive route "contacts.peek" and must be in policy.sensitive too (sensitivity follows the path, not the method)`}},
		{"nothing sensitive", func(c *Config) {
			c.Routes.Extra = []Route{{Name: "numbers.peek", Method: "GET", Path: "/v1/numbers/delete"}}
			c.Policy.Sensitive = nil
		}, nil},
		{"short ipv4-mapped cidr", func(c *Config) {
			c.Callers.TrustedProxies = []string{"::ffff:10.0.0.0/8"}
			c.Callers.List = []Caller{{Name: "a", CIDRs: []string{"::ffff:0:0/95", "::ffff:10.1.0.0/112"}}}
		}, []string{`callers.trusted_proxies[0]: invalid CIDR "::ffff:10.0.0.0/8" (an IPv4-mapped prefix needs at least /96)`,
			`callers.list[0].cidrs[0]: invalid CIDR "::ffff:0:0/95" (an IPv4-mapped prefix needs at least /96)`}},
		{"ipv4-mapped cidr is its ipv4 prefix", func(c *Config) {
			c.Callers.List = []Caller{{Name: "a", CIDRs: []string{"10.1.0.0/16"}}, {Name: "b", CIDRs: []string{"::ffff:10.1.2.3/112"}}}
		}, []string{`callers.list[1].cidrs[0]: "::ffff:10.1.2.3/112" also identifies caller "a" (callers.list[0].cidrs[0]); the identity would be ambiguous`}},
		{"ipv6 cidr that is not mapped", func(c *Config) {
			c.Callers.List = []Caller{{Name: "a", CIDRs: []string{"::/8", "fd00::/8"}}}
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
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
