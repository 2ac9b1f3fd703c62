package policy

import (
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/policy/route"
)

// Names of policy/limit and policy/route under their old names, while the request path moves
// to the new package. This file goes when nothing uses them.
type (
	Target       = route.Target
	Error        = route.Error
	RateResult   = limit.RateResult
	Holds        = limit.Holds
	HoldOptions  = limit.HoldOptions
	BudgetStatus = limit.BudgetStatus
	LimitStatus  = limit.LimitStatus
)

const (
	DefaultRedisRateTimeout = limit.DefaultRedisRateTimeout
	RouteAuth               = route.RouteAuth
	RouteUnmatched          = route.RouteUnmatched
)

var (
	RetryAfter = limit.RetryAfter
	NewHolds   = limit.NewHolds
)
