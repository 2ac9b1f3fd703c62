package policy

import (
	"time"

	"github.com/faxgate/faxgate/internal/config"
)

// Rules is everything that decides what a caller may do, compiled from the
// callers, routes, policy and rate_limit sections. The proxy reads it through
// one atomic pointer, so a reload swaps it whole between requests.
type Rules struct {
	Table      *Table
	Identifier *Identifier
	Policy     *Policy
	Limiter    RateLimiter
}

// Compile builds the rules of cfg. now is the rate limiters' clock.
func Compile(cfg *config.Config, now func() time.Time) (*Rules, error) {
	table, err := NewTable(cfg.Routes.Extra, cfg.Routes.Unmatched == "deny")
	if err != nil {
		return nil, err
	}
	id, err := NewIdentifier(cfg.Callers)
	if err != nil {
		return nil, err
	}
	pol, err := NewPolicy(cfg.Callers.List, cfg.Policy, table)
	if err != nil {
		return nil, err
	}
	return &Rules{
		Table:      table,
		Identifier: id,
		Policy:     pol,
		Limiter:    NewLocalRateLimiter(cfg.Callers.List, cfg.RateLimit.Default, now),
	}, nil
}
