package policy

import (
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/config"
)

// The policy package compiles validated configurations: the rules live once,
// in config.Validate. These tests hold the cases that NewTable, NewIdentifier
// and NewPolicy used to refuse themselves, and check that validation refuses
// each of them at its YAML path, so that moving the rules lost none.

// validatedConfig is a configuration that passes config.Validate, with the
// callers of validationCallers.
func validatedConfig(t *testing.T) *config.Config {
	t.Helper()
	c := config.Default()
	c.Upstream.BaseURL = "https://api.example.com"
	c.Upstream.APIKeyEnv = "FAXGATE_API_KEY"
	c.Callers = validationCallers()
	c.Routes.Extra = []config.Route{{Name: "ok", Method: "GET", Path: "/v1/ok"}}
	if ps := config.Validate(&c); ps != nil {
		t.Fatalf("the base configuration is invalid:\n%v", ps)
	}
	return &c
}

// validationCallers: four callers that identify nobody twice, for the
// cases below to break one at a time.
func validationCallers() config.Callers {
	return config.Callers{
		IdentityHeader: "X-Faxgate-Caller",
		TrustedProxies: []string{"10.0.0.1/32"},
		Unidentified:   "guest",
		List: []config.Caller{
			{Name: "intake", CIDRs: []string{"10.20.0.0/16"}, SpiffeIDs: []string{"spiffe://example.org/ns/a/sa/intake"}, HeaderValues: []string{"intake"}},
			{Name: "billing", CIDRs: []string{"10.20.30.0/24"}, SpiffeIDs: []string{"spiffe://example.org/ns/a/sa/billing"}, HeaderValues: []string{"billing"}},
			{Name: "ops", CIDRs: []string{"10.20.30.40/32"}, SpiffeIDs: []string{"spiffe://example.org/ns/a/sa/ops"}, HeaderValues: []string{"ops"}},
			{Name: "guest"},
		},
	}
}

// wantProblem fails unless ps has a problem at exactly path whose message
// contains msg.
func wantProblem(t *testing.T, ps config.Problems, path, msg string) {
	t.Helper()
	for _, p := range ps {
		if p.Path == path && strings.Contains(p.Message, msg) {
			return
		}
	}
	t.Errorf("no problem at %s containing %q; got:\n%v", path, msg, ps)
}

func TestValidateRefusesRoutes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route config.Route
		path  string // below routes.extra[1]
		want  string
	}{
		{"empty name", config.Route{Name: "", Method: "GET", Path: "/v1/a"}, "name", "required"},
		{"upper-case name", config.Route{Name: "Faxes", Method: "GET", Path: "/v1/a"}, "name", "invalid route name"},
		{"glob name", config.Route{Name: "faxes.*", Method: "GET", Path: "/v1/a"}, "name", "invalid route name"},
		// The grammar policy had allowed '-' and empty words; config's is the one now.
		{"dash name", config.Route{Name: "faxes.re-send", Method: "GET", Path: "/v1/a"}, "name", "invalid route name"},
		{"empty word", config.Route{Name: "faxes..send", Method: "GET", Path: "/v1/a"}, "name", "invalid route name"},
		{"long name", config.Route{Name: strings.Repeat("a", 64), Method: "GET", Path: "/v1/a"}, "name", "longer than 63"},
		{"builtin name", config.Route{Name: "numbers.delete", Method: "GET", Path: "/v1/a"}, "name", "built-in route name"},
		{"duplicate name", config.Route{Name: "ok", Method: "GET", Path: "/v1/a"}, "name", "duplicate route name"},
		{"unmatched name", config.Route{Name: "unmatched", Method: "GET", Path: "/v1/a"}, "name", "reserved"},
		{"unknown_route name", config.Route{Name: "unknown_route", Method: "GET", Path: "/v1/a"}, "name", "reserved"},
		{"bad method", config.Route{Name: "a", Method: "HEAD", Path: "/v1/a"}, "method", "invalid method"},
		{"lower method", config.Route{Name: "a", Method: "get", Path: "/v1/a"}, "method", "invalid method"},
		{"outside v1", config.Route{Name: "a", Method: "GET", Path: "/v2/a"}, "path", "invalid path"},
		{"upper V1", config.Route{Name: "a", Method: "GET", Path: "/V1/a"}, "path", "invalid path"},
		{"v1 only", config.Route{Name: "a", Method: "GET", Path: "/v1/"}, "path", "invalid path"},
		{"trailing slash", config.Route{Name: "a", Method: "GET", Path: "/v1/a/"}, "path", "invalid path"},
		{"double slash", config.Route{Name: "a", Method: "GET", Path: "/v1//a"}, "path", "invalid path"},
		{"dot", config.Route{Name: "a", Method: "GET", Path: "/v1/a.json"}, "path", "invalid path"},
		{"percent", config.Route{Name: "a", Method: "GET", Path: "/v1/a%20"}, "path", "invalid path"},
		{"empty param", config.Route{Name: "a", Method: "GET", Path: "/v1/{}"}, "path", "invalid path"},
		{"bad param", config.Route{Name: "a", Method: "GET", Path: "/v1/{a-b}"}, "path", "invalid path"},
		{"repeated param", config.Route{Name: "a", Method: "GET", Path: "/v1/{x}/{x}"}, "path", "twice"},
		{"same method and path", config.Route{Name: "a", Method: "POST", Path: "/v1/numbers/delete"}, "path", `is already route "numbers.delete"`},
		{"same path other params", config.Route{Name: "a", Method: "DELETE", Path: "/v1/esign_templates/{other}/theme"}, "path", `is already route "esign.theme.delete"`},
		{"same path other case", config.Route{Name: "a", Method: "GET", Path: "/v1/OK"}, "path", "spells a segment differently"},
		{"auth path", config.Route{Name: "a", Method: "GET", Path: "/v1/auth"}, "path", "owned by the gateway"},
		{"auth path any case", config.Route{Name: "a", Method: "PUT", Path: "/v1/Auth"}, "path", "owned by the gateway"},
		{"other spelling", config.Route{Name: "a", Method: "GET", Path: "/v1/Numbers/list"}, "path", "spells a segment differently"},
		{"sensitive path, not sensitive", config.Route{Name: "numbers.peek", Method: "GET", Path: "/v1/numbers/delete"}, "path", `route "numbers.peek" must be in policy.sensitive too`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validatedConfig(t)
			c.Routes.Extra = append(c.Routes.Extra, tc.route)
			wantProblem(t, config.Validate(c), "routes.extra[1]."+tc.path, tc.want)
		})
	}
}

func TestValidateRefusesCallers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*config.Callers)
		path   string
		want   string
	}{
		{"bad trusted proxy", func(c *config.Callers) { c.TrustedProxies = []string{"10.0.0/8"} }, "callers.trusted_proxies[0]", `invalid CIDR "10.0.0/8"`},
		{"bare address", func(c *config.Callers) { c.TrustedProxies = []string{"10.0.0.1"} }, "callers.trusted_proxies[0]", "a single address needs /32"},
		{"short 4in6 trusted proxy", func(c *config.Callers) { c.TrustedProxies = []string{"::ffff:10.0.0.0/8"} }, "callers.trusted_proxies[0]", "IPv4-mapped"},
		{"short 4in6 prefix", func(c *config.Callers) { c.List[0].CIDRs = []string{"::ffff:0:0/95"} }, "callers.list[0].cidrs[0]", "IPv4-mapped"},
		{"bad caller cidr", func(c *config.Callers) { c.List[1].CIDRs = []string{"x"} }, "callers.list[1].cidrs[0]", "invalid CIDR"},
		{"duplicate cidr", func(c *config.Callers) { c.List[1].CIDRs = []string{"10.20.0.0/16"} }, "callers.list[1].cidrs[0]", `also identifies caller "intake"`},
		{"duplicate cidr unmasked", func(c *config.Callers) { c.List[1].CIDRs = []string{"10.20.9.9/16"} }, "callers.list[1].cidrs[0]", `also identifies caller "intake"`},
		{"duplicate cidr 4in6", func(c *config.Callers) { c.List[1].CIDRs = []string{"::ffff:10.20.0.0/112"} }, "callers.list[1].cidrs[0]", `also identifies caller "intake"`},
		{"duplicate spiffe", func(c *config.Callers) { c.List[2].SpiffeIDs = []string{"spiffe://example.org/ns/a/sa/intake"} }, "callers.list[2].spiffe_ids[0]", `also identifies caller "intake"`},
		{"duplicate header value", func(c *config.Callers) { c.List[2].HeaderValues = []string{"billing"} }, "callers.list[2].header_values[0]", `also identifies caller "billing"`},
		{"padded header value", func(c *config.Callers) { c.List[2].HeaderValues = []string{" ops"} }, "callers.list[2].header_values[0]", "surrounding spaces"},
		{"empty header value", func(c *config.Callers) { c.List[2].HeaderValues = []string{""} }, "callers.list[2].header_values[0]", "must not be empty"},
		{"duplicate name", func(c *config.Callers) { c.List[3].Name = "intake" }, "callers.list[3].name", "duplicate caller name"},
		{"bad name", func(c *config.Callers) { c.List[3].Name = "Guest" }, "callers.list[3].name", "invalid name"},
		{"unknown unidentified", func(c *config.Callers) { c.Unidentified = "nobody" }, "callers.unidentified", "neither"},
		{"empty unidentified", func(c *config.Callers) { c.Unidentified = "" }, "callers.unidentified", "neither"},
		{"unknown allow", func(c *config.Callers) { c.List[0].Allow = []string{"numbers.delte"} }, "callers.list[0].allow[0]", "matches no route"},
		{"bad glob", func(c *config.Callers) { c.List[0].Allow = []string{"contacts.list", "numbers.["} }, "callers.list[0].allow[1]", "invalid pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validatedConfig(t)
			tc.mutate(&c.Callers)
			wantProblem(t, config.Validate(c), tc.path, tc.want)
		})
	}
}

func TestValidateRefusesPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*config.Config)
		path   string
		want   string
	}{
		{"unknown sensitive", func(c *config.Config) { c.Policy.Sensitive = []string{"numbers.delte"} }, "policy.sensitive[0]", "unknown route"},
		{"unknown confirm", func(c *config.Config) { c.Policy.Confirm = []string{"x"} }, "policy.confirm[0]", "unknown route"},
		{"sensitive path shared with a route that is not sensitive", func(c *config.Config) {
			c.Routes.Extra = append(c.Routes.Extra, config.Route{Name: "numbers.peek", Method: "GET", Path: "/v1/numbers/delete"})
		}, "routes.extra[1].path", `route "numbers.peek" must be in policy.sensitive too`},
		{"another route on a sensitive extra's path", func(c *config.Config) {
			c.Policy.Sensitive = []string{"ok", "numbers.delete"}
			c.Routes.Extra = append(c.Routes.Extra, config.Route{Name: "ok_put", Method: "PUT", Path: "/v1/ok"})
		}, "routes.extra[1].path", `route "ok_put" must be in policy.sensitive too`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validatedConfig(t)
			tc.mutate(c)
			wantProblem(t, config.Validate(c), tc.path, tc.want)
		})
	}
}

// TestSharedSensitivePath: with both routes on the path sensitive, the
// configuration is valid, and each route needs its own exact grant.
func TestSharedSensitivePath(t *testing.T) {
	c := validatedConfig(t)
	c.Routes.Extra = append(c.Routes.Extra, config.Route{Name: "numbers.peek", Method: "GET", Path: "/v1/numbers/delete"})
	c.Policy.Sensitive = []string{"numbers.delete", "numbers.peek"}
	c.Callers.List[0].Allow = []string{"*", "numbers.peek"}
	if ps := config.Validate(c); ps != nil {
		t.Fatalf("Validate: %v", ps)
	}
	rules, err := Compile(c.RuleSections(), nil)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if d := rules.Policy.Decide("intake", "numbers.peek"); !d.Allowed || !d.Sensitive {
		t.Errorf("numbers.peek = %+v", d)
	}
	if d := rules.Policy.Decide("intake", "numbers.delete"); d.Allowed || !d.Sensitive {
		t.Errorf("numbers.delete = %+v", d)
	}
}

// TestCompileGuards: the checks policy keeps are guards against input that
// skipped validation, each of which would otherwise build wrong rules.
func TestCompileGuards(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*config.Config)
		want   string
	}{
		{"route outside /v1/", func(c *config.Config) { c.Routes.Extra[0].Path = "/v2/ok" }, "routes.extra[0]: path"},
		{"second route on the token endpoint", func(c *config.Config) { c.Routes.Extra[0].Path = "/v1/Auth" }, "routes.extra[0]: path"},
		{"trusted proxy cidr", func(c *config.Config) { c.Callers.TrustedProxies = []string{"::ffff:10.0.0.0/8"} }, "callers.trusted_proxies[0]"},
		{"caller cidr", func(c *config.Config) { c.Callers.List[1].CIDRs = []string{"10.0.0/8"} }, "callers.list[1].cidrs[0]"},
		{"unknown sensitive route", func(c *config.Config) { c.Policy.Sensitive = []string{"numbers.delte"} }, "policy.sensitive[0]"},
		{"unknown confirm route", func(c *config.Config) { c.Policy.Confirm = []string{"numbers.delte"} }, "policy.confirm[0]"},
		{"redis backend without a connection", func(c *config.Config) { c.RateLimit.Backend = "redis" }, "rate_limit.backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validatedConfig(t)
			tc.mutate(c)
			_, err := Compile(c.RuleSections(), nil)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("Compile error = %v, want %q...", err, tc.want)
			}
		})
	}
}
