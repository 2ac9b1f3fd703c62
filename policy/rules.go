package policy

import (
	"time"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy/identity"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/policy/routetable"
)

// Rules is everything that decides what a caller may do, compiled from the
// callers, routes, policy, rate_limit and upstream_budget sections. The
// proxy reads it through one atomic pointer, so a reload swaps it whole
// between requests.
type Rules struct {
	Table      *route.Table
	Identifier *identity.Identifier
	Policy     *Policy
	Limiter    limit.RateLimiter
	// Upstream is upstream_budget compiled: the limits' windows (Budget,
	// nil when there are none), the holds' and the waits' settings.
	Upstream limit.UpstreamRules
	// IdentityHeader is callers.identity_header as the forward compares
	// header names: canonical, with underscores read as hyphens
	// (routetable.FoldedHeaderName). It is never forwarded upstream, however the
	// config or the request spells it.
	IdentityHeader string
	// AuthShim answers POST /v1/auth locally (policy.auth_endpoint: shim)
	// instead of refusing it; it is never forwarded either way.
	AuthShim bool

	// resolver resolves request-targets with Table and the sensitive routes.
	resolver *route.Resolver
}

// Compile builds the rules of s. now is the rate limiters' clock. With
// rate_limit.backend: redis, opts must include WithRedis.
//
// s must have passed validation (config.Load, config.Validate): the rules
// for callers, routes and policy live there, once, with YAML paths, so that
// faxgate check refuses everything Compile would. What Compile still
// refuses are guards against input that skipped validation, and a reload
// that switches to the Redis rate limiter without a Redis connection.
func Compile(s config.RuleSections, now func() time.Time, opts ...CompileOption) (*Rules, error) {
	table, err := route.NewTable(s.Routes.Extra, s.Routes.Unmatched == "deny")
	if err != nil {
		return nil, err
	}
	id, err := identity.New(s.Callers)
	if err != nil {
		return nil, err
	}
	pol, err := NewPolicy(s.Callers.List, s.Policy, table)
	if err != nil {
		return nil, err
	}
	var o compileOptions
	for _, opt := range opts {
		opt(&o)
	}
	var prevLimiter limit.RateLimiter
	var prevBudget limit.Budget
	if o.prev != nil {
		prevLimiter, prevBudget = o.prev.Limiter, o.prev.Upstream.Budget
	}
	lim, err := limit.NewRateLimiter(limit.RateConfig{RateLimit: s.RateLimit, Callers: s.Callers.List, KeyPrefix: s.KeyPrefix},
		now, o.deps, prevLimiter)
	if err != nil {
		return nil, err
	}
	budget := limit.NewBudget(limit.BudgetConfig{Budget: s.UpstreamBudget, Shared: s.RateLimit.Backend == "redis",
		ReplicasHint: s.RateLimit.ReplicasHint, KeyPrefix: s.KeyPrefix, Routes: table.RouteNames()}, now, o.deps, prevBudget)
	return &Rules{
		Table:          table,
		Identifier:     id,
		Policy:         pol,
		Limiter:        lim,
		Upstream:       limit.CompileUpstream(s.UpstreamBudget, budget),
		IdentityHeader: routetable.FoldedHeaderName(s.Callers.IdentityHeader),
		AuthShim:       s.Policy.AuthEndpoint == "shim",
		resolver:       route.NewResolver(table, func(r string) bool { return pol.Base(r).Sensitive }),
	}, nil
}

// Shared reports whether the rules' rate limits or budget windows are
// decided through Redis (a round trip a decision may wait for).
func (r *Rules) Shared() bool {
	_, rate := r.Limiter.(*limit.RedisRateLimiter)
	_, budget := r.Upstream.Budget.(*limit.RedisBudget)
	return rate || budget
}

// Resolve resolves a request-target to the route policy decides on and the
// path the gateway forwards (route.Resolver.Resolve: the path rules, and the
// paths below a sensitive route or /v1/auth that no caller reaches).
func (r *Rules) Resolve(method, requestURI string) (route.Target, *route.Error) {
	return r.resolver.Resolve(method, requestURI)
}
