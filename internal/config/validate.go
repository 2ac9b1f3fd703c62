package config

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/faxgate/faxgate/policy/routetable"
)

// Validate is pure: it returns every problem of c, in file order (the order
// of the sections in docs/configuration.md and config.example.yaml, which a
// file is expected to follow), nil when c is valid. It reads no file and no
// environment: CheckEnvironment does that, so that a reload or a test can
// validate without either.
func Validate(c *Config) Problems {
	v := &validator{}
	v.validate(c)
	return v.problems
}

// validator collects problems. src, when set, holds each path's text as
// written in the file (see decoder.src).
type validator struct {
	src      map[string]string
	problems Problems
	// now, when set, replaces the wall clock for certificate expiry
	// (CheckEnvironment); tests set it.
	now func() time.Time
	// patterns memoizes matchesRoute.
	patterns map[string]bool
	// lookupHost, when set, replaces net.DefaultResolver.LookupNetIP for
	// listener host names (CheckEnvironment); tests set it.
	lookupHost func(ctx context.Context, network, host string) ([]netip.Addr, error)
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// q quotes the value at path for a message. When the file gave that value,
// q quotes the file's text, so a value expanded from ${NAME} shows as
// "${NAME}" and never as the environment's value.
func (v *validator) q(path, value string) string {
	if s, ok := v.src[path]; ok {
		return strconv.Quote(s)
	}
	return strconv.Quote(value)
}

func (v *validator) qint(path string, i int64) string {
	return v.q(path, strconv.FormatInt(i, 10))
}

func (v *validator) qfloat(path string, f float64) string {
	return v.q(path, strconv.FormatFloat(f, 'g', -1, 64))
}

// oneOf checks that value is one of allowed.
func (v *validator) oneOf(path, value string, allowed ...string) bool {
	if contains(allowed, value) {
		return true
	}
	v.add(path, "invalid value %s (want %s)", v.q(path, value), orList(allowed))
	return false
}

func (v *validator) positive(path string, d time.Duration) {
	if d <= 0 {
		v.add(path, "must be greater than 0, got %s", v.q(path, d.String()))
	}
}

// envName checks a field naming an environment variable, when set.
func (v *validator) envName(path, name string) {
	if name != "" && !validEnvName(name) {
		v.add(path, "invalid environment variable name %s", v.q(path, name))
	}
}

// file checks a field naming a file, when set. Whether the file can be
// used is for CheckEnvironment to say.
func (v *validator) file(path, name string) {
	if name != "" && strings.TrimSpace(name) == "" {
		v.add(path, "must not be blank")
	}
}

func (v *validator) validate(c *Config) {
	if c == nil {
		v.add("", "no configuration")
		return
	}
	v.validateServer(c.Server)
	v.validateAdmin(c.Admin, c.Server)
	v.validateUpstream(c.Upstream)
	v.validateToken(c.Token)
	v.validateRedis(c.Redis)
	v.validateCallers(c.Callers, c.Routes.Extra, c.Server.TLS.Mode != "off" && c.Server.TLS.ClientCAFile != "")
	v.validateRateLimit(c.RateLimit)
	v.validateRoutes(c.Routes)
	v.validatePolicy(c.Policy, c.Routes.Extra)
	v.validateUpstreamBudget(c.UpstreamBudget, c.Callers.List)
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", c.Log.Format, "json", "console")
}

func (v *validator) validateServer(s Server) {
	v.listen("server.listen", s.Listen)
	if s.MaxBodyBytes <= 0 {
		v.add("server.max_body_bytes", "must be greater than 0, got %s", v.qint("server.max_body_bytes", s.MaxBodyBytes))
	}
	if s.ResendBufferBytes < 0 {
		v.add("server.resend_buffer_bytes", "must be 0 or more, got %s", v.qint("server.resend_buffer_bytes", s.ResendBufferBytes))
	}
	v.positive("server.read_header_timeout", s.ReadHeaderTimeout)
	v.positive("server.read_timeout", s.ReadTimeout)
	v.positive("server.idle_timeout", s.IdleTimeout)
	v.positive("server.shutdown_timeout", s.ShutdownTimeout)

	t := s.TLS
	v.oneOf("server.tls.mode", t.Mode, "off", "files", "acme")
	v.oneOf("server.tls.min_version", t.MinVersion, "1.2", "1.3")
	if t.Mode == "files" {
		if t.CertFile == "" {
			v.add("server.tls.cert_file", `required with server.tls.mode "files"`)
		}
		if t.KeyFile == "" {
			v.add("server.tls.key_file", `required with server.tls.mode "files"`)
		}
	} else {
		if t.CertFile != "" {
			v.add("server.tls.cert_file", `only used with server.tls.mode "files"`)
		}
		if t.KeyFile != "" {
			v.add("server.tls.key_file", `only used with server.tls.mode "files"`)
		}
	}
	v.file("server.tls.cert_file", t.CertFile)
	v.file("server.tls.key_file", t.KeyFile)
	v.file("server.tls.client_ca_file", t.ClientCAFile)
	// A client CA on a plaintext listener would verify nothing: refused
	// rather than ignored, so nobody believes callers are verified.
	if t.ClientCAFile != "" && t.Mode == "off" {
		v.add("server.tls.client_ca_file", `needs server.tls.mode "files" or "acme"`)
	}
	if v.oneOf("server.tls.client_auth", t.ClientAuth, "optional", "require") &&
		t.ClientAuth == "require" && t.ClientCAFile == "" {
		v.add("server.tls.client_auth", `"require" needs server.tls.client_ca_file to verify certificates against`)
	}
	if t.Mode != "acme" {
		// Every acme key is refused outside mode acme rather than
		// ignored, so nobody believes a certificate is being obtained.
		a := t.ACME
		for _, k := range []struct {
			key string
			set bool
		}{
			{"domains", len(a.Domains) > 0},
			{"email", a.Email != ""},
			{"directory", a.Directory != ""},
			{"ca_root_file", a.CARootFile != ""},
			{"storage", a.Storage == "redis"},
			{"storage_path", a.StoragePath != ""},
			{"http_listen", a.HTTPListen != ""},
		} {
			if k.set {
				v.add("server.tls.acme."+k.key, `only used with server.tls.mode "acme"`)
			}
		}
	}
	if t.Mode == "off" && t.MinVersion == "1.3" {
		v.add("server.tls.min_version", `needs server.tls.mode "files" or "acme"`)
	}
	v.oneOf("server.tls.acme.storage", t.ACME.Storage, "file", "redis")
	v.file("server.tls.acme.ca_root_file", t.ACME.CARootFile)
	v.file("server.tls.acme.storage_path", t.ACME.StoragePath)
	if t.Mode == "acme" {
		v.validateACME(t.ACME)
	}
	if ls := serverListeners(s); len(ls) > 1 {
		v.ownAddress(ls[1], ls[:1])
	}
}

// validateACME checks server.tls.acme for mode acme: the names to obtain a
// certificate for, and where to obtain it from.
func (v *validator) validateACME(a ACME) {
	if len(a.Domains) == 0 {
		v.add("server.tls.acme.domains", `required with server.tls.mode "acme"`)
	}
	seen := map[string]bool{}
	for i, d := range a.Domains {
		p := fmt.Sprintf("server.tls.acme.domains[%d]", i)
		switch {
		case !validDNSName(d):
			// Wildcards need dns-01, which faxgate does not offer; IP
			// addresses are refused by the public CAs' policies.
			v.add(p, "invalid DNS name %s (want a host name such as api.example.com; no wildcard, no IP address)", v.q(p, d))
		case seen[strings.ToLower(d)]:
			v.add(p, "duplicate domain %s", v.q(p, d))
		}
		seen[strings.ToLower(d)] = true
	}
	if a.Directory != "" {
		u, err := url.Parse(a.Directory)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
			v.add("server.tls.acme.directory", "invalid ACME directory URL %s (want https://host/path, or empty for the public default CA)", v.q("server.tls.acme.directory", a.Directory))
		}
	}
	if a.HTTPListen != "" {
		v.listen("server.tls.acme.http_listen", a.HTTPListen)
	}
	if a.Storage == "redis" && a.StoragePath != "" {
		v.add("server.tls.acme.storage_path", `only used with server.tls.acme.storage "file"`)
	}
}

// validDNSName reports whether s is a host name: dot-separated labels of
// letters, digits and inner hyphens, 63 bytes each, 253 in all.
func validDNSName(s string) bool {
	if s == "" || len(s) > 253 || net.ParseIP(s) != nil {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
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
	if port < minPort || port > 65535 || !validHost(host) {
		return "", 0, false
	}
	return host, port, true
}

func validHost(h string) bool {
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

func (v *validator) validateAdmin(a Admin, s Server) {
	v.listen("admin.listen", a.Listen)
	v.ownAddress(listener{"admin.listen", a.Listen}, serverListeners(s))
}

func (v *validator) validateUpstream(u Upstream) {
	v.baseURL("upstream.base_url", u.BaseURL)
	if (u.APIKeyFile == "") == (u.APIKeyEnv == "") {
		v.add("upstream", "exactly one of api_key_file and api_key_env is required")
	}
	v.file("upstream.api_key_file", u.APIKeyFile)
	v.envName("upstream.api_key_env", u.APIKeyEnv)
	v.positive("upstream.timeout", u.Timeout)
	v.file("upstream.ca_file", u.CAFile)
	if u.MaxIdleConns < 0 {
		v.add("upstream.max_idle_conns", "must not be negative, got %s", v.qint("upstream.max_idle_conns", int64(u.MaxIdleConns)))
	}
}

// baseURL checks the upstream's {base_url}: an absolute http(s) URL with a
// host and nothing the gateway could not append a route path to. A trailing
// slash on its path is fine: the proxy joins base and route paths without
// doubling the slash.
func (v *validator) baseURL(path, s string) {
	if s == "" {
		v.add(path, "required")
		return
	}
	u, err := url.Parse(s)
	if err == nil && u.User != nil {
		v.add(path, "must not contain credentials (user:password@); use api_key_file or api_key_env")
		return
	}
	// Never echo a URL that may hold credentials, however malformed.
	qs := v.q(path, s)
	if strings.Contains(qs, "@") {
		qs = "the URL"
	}
	switch {
	case err != nil:
		v.add(path, "invalid URL %s", qs)
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(path, "%s is not an absolute http or https URL", qs)
	case u.Host == "" || u.Hostname() == "":
		v.add(path, "%s has no host", qs)
	case u.RawQuery != "" || u.ForceQuery:
		v.add(path, "%s must not have a query", qs)
	case u.Fragment != "" || strings.Contains(s, "#"):
		v.add(path, "%s must not have a fragment", qs)
	}
}

func (v *validator) validateToken(t Token) {
	v.oneOf("token.store", t.Store, "memory", "redis")
	v.positive("token.refresh_before", t.RefreshBefore)
	// Renewing this long or longer before expiry would renew on every tick.
	if t.RefreshBefore >= TokenLifetime {
		v.add("token.refresh_before", "must be less than the %s token lifetime (a token is renewed this long before it expires), got %s",
			strings.TrimSuffix(TokenLifetime.String(), "0m0s"), v.q("token.refresh_before", t.RefreshBefore.String()))
	}
	v.positive("token.retry_min", t.RetryMin)
	v.positive("token.retry_max", t.RetryMax)
	if t.RetryMin > t.RetryMax {
		v.add("token.retry_min", "%s is greater than token.retry_max %s",
			v.q("token.retry_min", t.RetryMin.String()), v.q("token.retry_max", t.RetryMax.String()))
	}
}

func (v *validator) validateRedis(r Redis) {
	if len(r.Addrs) == 0 {
		v.add("redis.addrs", "must list at least one address")
	}
	for i, a := range r.Addrs {
		p := fmt.Sprintf("redis.addrs[%d]", i)
		if _, _, ok := splitAddr(a, 1); !ok {
			v.add(p, "invalid address %s (want host:port, port 1-65535)", v.q(p, a))
		}
	}
	v.envName("redis.password_env", r.PasswordEnv)
	if r.DB < 0 {
		v.add("redis.db", "must not be negative, got %s", v.qint("redis.db", int64(r.DB)))
	} else if r.DB != 0 && len(r.Addrs) > 1 && r.MasterName == "" {
		// Several addresses without master_name is Redis Cluster, which has
		// only database 0: the setting would be silently ignored.
		v.add("redis.db", "Redis Cluster (several addrs, no master_name) has only database 0, got %s", v.qint("redis.db", int64(r.DB)))
	}
	if r.KeyPrefix == "" {
		v.add("redis.key_prefix", "must not be empty")
	}
	// A trust root without TLS would be ignored, and the operator who set
	// it believes the connection is verified.
	if r.CAFile != "" && !r.TLS {
		v.add("redis.ca_file", "only used with redis.tls: true")
	}
	v.file("redis.ca_file", r.CAFile)
}

// limit checks a token-bucket rate at path.
func (v *validator) limit(path string, l Limit) {
	if !(l.RPS > 0) || math.IsInf(l.RPS, 0) {
		v.add(path+".rps", "must be greater than 0, got %s", v.qfloat(path+".rps", l.RPS))
	}
	if l.Burst < 1 {
		v.add(path+".burst", "must be at least 1, got %s", v.qint(path+".burst", int64(l.Burst)))
	}
}

func (v *validator) validateRateLimit(r RateLimit) {
	v.oneOf("rate_limit.backend", r.Backend, "local", "redis")
	v.limit("rate_limit.default", r.Default)
	if r.ReplicasHint < 1 {
		v.add("rate_limit.replicas_hint", "must be at least 1, got %s", v.qint("rate_limit.replicas_hint", int64(r.ReplicasHint)))
	}
}

func (v *validator) validatePolicy(p Policy, extra []Route) {
	known := map[string]bool{}
	for _, n := range routeNames(extra) {
		known[n] = true
	}
	check := func(key string, names []string) {
		for i, n := range names {
			path := fmt.Sprintf("policy.%s[%d]", key, i)
			switch {
			case n == "auth":
				v.add(path, `"auth" is governed by policy.auth_endpoint`)
			case !known[n]:
				v.add(path, "unknown route %s", v.q(path, n))
			}
		}
	}
	check("sensitive", p.Sensitive)
	check("confirm", p.Confirm)
	v.oneOf("policy.auth_endpoint", p.AuthEndpoint, "deny", "shim")
	v.sensitivePaths(p.Sensitive, extra)
}

// sensitivePaths checks that every route sharing a sensitive route's path
// is sensitive too. Sensitivity follows the path, not the method
// (docs/callers-and-policy.md): a request on that path gets the sensitive
// route's policy whatever its method, so another route there that is not
// sensitive would be a second, weaker policy for the same path. An extra
// route is reported at its path, a built-in one at the sensitive entry that
// shares it. Extra routes already reported for their name, method or path
// are left out.
func (v *validator) sensitivePaths(sensitive []string, extra []Route) {
	sens := map[string]bool{}
	for _, n := range sensitive {
		sens[n] = true
	}
	type entry struct {
		r     Route
		extra int // index in routes.extra; -1 for a built-in route
	}
	// byPath groups the usable routes by their path as the router
	// matches it (letter case and parameter names ignored).
	byPath := map[string][]entry{}
	pathOf := map[string]string{} // route name -> its key in byPath
	add := func(r Route, i int) {
		if validRoutePath(r.Path) && routetable.IsMethod(r.Method) {
			k := routeShape("", r.Path)
			byPath[k] = append(byPath[k], entry{r, i})
			pathOf[r.Name] = k
		}
	}
	for _, r := range BuiltinRoutes() {
		add(r, -1)
	}
	// One pass over the problems, not one per route: a file of aliases can
	// hold thousands of extra routes.
	refused := map[string]bool{}
	for _, p := range v.problems {
		if rest, ok := strings.CutPrefix(p.Path, "routes.extra["); ok {
			if i := strings.IndexByte(rest, ']'); i >= 0 {
				refused[rest[:i]] = true
			}
		}
	}
	for i, r := range extra {
		if !refused[strconv.Itoa(i)] {
			add(r, i)
		}
	}
	// report names a route e that takes requests of sensitive route n
	// (entry k of policy.sensitive) without being sensitive, once; shared
	// says whether it has the very same path or only names some of its
	// paths.
	reported := map[entry]bool{}
	report := func(k int, n string, e entry, shared bool) {
		if sens[e.r.Name] || reported[e] {
			return
		}
		reported[e] = true
		const why = " (sensitivity follows the path, not the method)"
		if e.extra < 0 {
			p := fmt.Sprintf("policy.sensitive[%d]", k)
			how := "names paths of"
			if shared {
				how = "shares the path of"
			}
			v.add(p, "built-in route %s %s sensitive route %s and must be in policy.sensitive too"+why,
				strconv.Quote(e.r.Name), how, v.q(p, n))
			return
		}
		p := fmt.Sprintf("routes.extra[%d].path", e.extra)
		how := "names paths of"
		if shared {
			how = "is the path of"
		}
		v.add(p, "%s %s sensitive route %s, so route %s must be in policy.sensitive too"+why,
			v.q(p, e.r.Path), how, strconv.Quote(n), v.q(fmt.Sprintf("routes.extra[%d].name", e.extra), e.r.Name))
	}
	for k, n := range sensitive {
		if key, ok := pathOf[n]; ok {
			for _, e := range byPath[key] {
				report(k, n, e, true)
			}
		}
	}
	// A route whose path has a fixed segment where a sensitive route's has a
	// parameter, or the other way round, names some of the same request
	// paths (/v1/faxes/inbox is a path of /v1/faxes/{faxId}); the router
	// picks the fixed one, so it would take those paths from the sensitive
	// route's policy and its audit line (routetable.TakesPaths). The routes
	// of one key share a shape, so the first of each stands for all.
	keys := make([]string, 0, len(byPath))
	for key := range byPath {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for k, n := range sensitive {
		key, ok := pathOf[n]
		if !ok {
			continue
		}
		for _, other := range keys {
			if routetable.OverlapOf(byPath[key][0].r.Path, byPath[other][0].r.Path) != routetable.TakesPaths {
				continue
			}
			for _, e := range byPath[other] {
				report(k, n, e, false)
			}
		}
	}
}

// hasProblemAt reports whether a problem was found at exactly path.
func (v *validator) hasProblemAt(path string) bool {
	for _, p := range v.problems {
		if p.Path == path {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// orList renders ["a", "b", "c"] as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
