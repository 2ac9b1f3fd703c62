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
// callers, routes, policy and rate_limit sections. The proxy reads it through
// one atomic pointer, so a reload swaps it whole between requests.
type Rules struct {
	Table      *route.Table
	Identifier *identity.Identifier
	Policy     *Policy
	Limiter    limit.RateLimiter
	// Budget is upstream_budget's limits; nil when there are none.
	Budget limit.Budget
	// BudgetLimits are the names of upstream_budget's limits, in the file's
	// order: the limit label values the config makes known.
	BudgetLimits []string
	// HonorRetryAfter and MaxHold are upstream_budget's: an upstream 429
	// holds its route for its Retry-After, at most MaxHold.
	HonorRetryAfter bool
	MaxHold         time.Duration
	// MaxWait and MaxWaiting are upstream_budget's: with MaxWait > 0 a
	// request a hold or a limit refuses waits for its turn instead
	// (limit.Waitlist).
	MaxWait    time.Duration
	MaxWaiting int
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

// Compile builds the rules of cfg. now is the rate limiters' clock. With
// rate_limit.backend: redis, opts must include WithRedis.
//
// cfg must have passed validation (config.Load, config.Validate): the rules
// for callers, routes and policy live there, once, with YAML paths, so that
// faxgate check refuses everything Compile would. What Compile still
// refuses are guards against input that skipped validation, and a reload
// that switches to the Redis rate limiter without a Redis connection.
func Compile(cfg *config.Config, now func() time.Time, opts ...CompileOption) (*Rules, error) {
	table, err := route.NewTable(cfg.Routes.Extra, cfg.Routes.Unmatched == "deny")
	if err != nil {
		return nil, err
	}
	id, err := identity.New(cfg.Callers)
	if err != nil {
		return nil, err
	}
	pol, err := NewPolicy(cfg.Callers.List, cfg.Policy, table)
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
		prevLimiter, prevBudget = o.prev.Limiter, o.prev.Budget
	}
	lim, err := limit.NewRateLimiter(cfg, now, o.deps, prevLimiter)
	if err != nil {
		return nil, err
	}
	return &Rules{
		Table:        table,
		Identifier:   id,
		Policy:       pol,
		Limiter:      lim,
		Budget:       limit.NewBudget(cfg, table.RouteNames(), now, o.deps, prevBudget),
		BudgetLimits: budgetLimitNames(cfg.UpstreamBudget),

		HonorRetryAfter: cfg.UpstreamBudget.HonorRetryAfter,
		MaxHold:         cfg.UpstreamBudget.MaxHold,
		MaxWait:         cfg.UpstreamBudget.MaxWait,
		MaxWaiting:      cfg.UpstreamBudget.MaxWaiting,

		IdentityHeader: routetable.FoldedHeaderName(cfg.Callers.IdentityHeader),
		AuthShim:       cfg.Policy.AuthEndpoint == "shim",
		resolver:       route.NewResolver(table, func(r string) bool { return pol.Base(r).Sensitive }),
	}, nil
}

func budgetLimitNames(b config.UpstreamBudget) []string {
	names := make([]string, 0, len(b.Limits))
	for _, l := range b.Limits {
		names = append(names, l.Name)
	}
	return names
}

// Resolve resolves a request-target to the route policy decides on and the
// path the gateway forwards (route.Resolver.Resolve: the path rules, and the
// paths below a sensitive route or /v1/auth that no caller reaches).
func (r *Rules) Resolve(method, requestURI string) (route.Target, *route.Error) {
	return r.resolver.Resolve(method, requestURI)
}
