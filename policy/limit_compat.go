package policy

import "github.com/faxgate/faxgate/policy/limit"

// Names of policy/limit under their old names, while the request path moves
// to the new package. This file goes when nothing uses them.
type (
	RateResult   = limit.RateResult
	Holds        = limit.Holds
	HoldOptions  = limit.HoldOptions
	BudgetStatus = limit.BudgetStatus
	LimitStatus  = limit.LimitStatus
)

const DefaultRedisRateTimeout = limit.DefaultRedisRateTimeout

var (
	RetryAfter = limit.RetryAfter
	NewHolds   = limit.NewHolds
)
