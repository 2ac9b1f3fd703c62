package config

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
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

// validate checks c section by section, in file order. Each section's
// checks live in its own file, validate_<section>.go; this file holds the
// validator and the helpers every section uses.
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
	v.validateUpstreamBudget(c.UpstreamBudget, c.Callers.List, c.Server.ShutdownTimeout)
	v.validateTracing(c.Tracing)
	v.validateLog(c.Log)
	v.file("shadow.config_file", c.Shadow.ConfigFile)
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
