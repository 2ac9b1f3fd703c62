package limit

// The upstream budget (upstream_budget.limits and .shares,
// docs/upstream-budget.md): the vendor's limits, shared fairly between callers.
//
// Every limit is a sliding window of length per over the requests admitted
// to the upstream: a route-scope limit keeps one window per route name, a
// tenant-scope limit one window for all forwarded requests. A window is an
// exact log of (time, caller) entries, so there is no boundary at which twice
// the limit could pass. In a window of N = requests:
//
//   - caller c's reserve is R_c = floor(reserve x N), its cap C_c = floor(cap x N)
//     (N without a cap);
//   - the unreserved pool is U = N - sum of all R_c;
//   - u_c is c's admitted entries in the window; the pool's use is
//     P = sum over callers of max(0, u_c - R_c): whatever a caller used beyond
//     its reserve.
//
// c is admitted when u_c < C_c and (u_c < R_c or P < U), and then counts in
// every window that covers the request. A reserve is kept for its caller even
// while it is idle, so the total never exceeds sum R_c + U = N; the pool is
// first come, first served, so one caller alone may use all of U. A refusal's
// Retry-After is the time until the window frees a slot this caller may use:
// the oldest entry whose expiry lowers P (an entry of a caller above its
// reserve, or of c itself), or for a cap, c's own entry that brings u_c below
// C_c; with several windows, the latest of them.

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/faxgate/faxgate/internal/config"
)

// BudgetDecision is the budget's answer for one request.
type BudgetDecision struct {
	Allowed bool
	// Limit is the name of a limit that refused (when !Allowed).
	Limit string
	// RetryAfter is how long until this caller could be admitted (when !Allowed).
	RetryAfter time.Duration
	// Window is the refusing limit's window: the route name for scope
	// route, "" for the tenant.
	Window string
	// Capped: the caller's own cap refused (its entries must leave), not
	// the shared pool. A waiting request waits on its own then (wait.go).
	Capped bool
}

// Budget decides whether a request may go upstream under upstream_budget,
// and reports the windows for GET /budget.
type Budget interface {
	// Admit decides one request of caller to route and, when it is
	// admitted, counts it. ctx bounds a wait for a shared store.
	Admit(ctx context.Context, caller, route string) BudgetDecision
	// Status reports every window with entries.
	Status(ctx context.Context) BudgetStatus
}

// BudgetStatus is GET /budget's view of the limits.
type BudgetStatus struct {
	// Backend is "redis" (fleet-wide) or "local" (this replica: the local
	// backend, or Redis unreachable).
	Backend string        `json:"backend"`
	Limits  []LimitStatus `json:"limits"`
}

// LimitStatus is one limit with its windows.
type LimitStatus struct {
	Name     string `json:"name"`
	Scope    string `json:"scope"`
	Requests int    `json:"requests"`
	// Effective is the window size this view enforces: Requests, or its
	// replicas_hint share while deciding locally.
	Effective int            `json:"effective_requests"`
	Per       string         `json:"per"`
	Windows   []WindowStatus `json:"windows"`
}

// WindowStatus is one window: a route's (scope route) or the tenant's.
type WindowStatus struct {
	Route     string                  `json:"route,omitempty"`
	Used      int                     `json:"used"`
	Pool      int                     `json:"unreserved"`
	PoolUsed  int                     `json:"unreserved_used"`
	Remaining int                     `json:"remaining"`
	Callers   map[string]CallerWindow `json:"callers"`
}

// CallerWindow is one caller's part of a window.
type CallerWindow struct {
	Used     int `json:"used"`
	Reserved int `json:"reserved"`
	// Cap is the caller's ceiling; 0 when it has none.
	Cap int `json:"cap,omitempty"`
	// Remaining is how many more requests this caller would be admitted now.
	Remaining int `json:"remaining"`
}

// budgetLimit is one limit compiled for a window size n.
type budgetLimit struct {
	name     string
	tenant   bool
	requests int // as configured
	n        int // enforced: requests, or requests / replicas_hint locally
	per      time.Duration
	reserve  map[string]int // R_c > 0 only
	cap      map[string]int // C_c for callers with a cap
	pool     int            // U
	// reserved is reserve's callers in a fixed order (Redis arguments).
	reserved []string
}

func compileLimits(b config.UpstreamBudget, divide int) []*budgetLimit {
	out := make([]*budgetLimit, 0, len(b.Limits))
	for _, l := range b.Limits {
		n := max(1, l.Requests/max(1, divide))
		bl := &budgetLimit{name: l.Name, tenant: l.Scope == "tenant", requests: l.Requests, n: n, per: l.Per,
			reserve: map[string]int{}, cap: map[string]int{}}
		total := 0
		for caller, s := range b.Shares {
			if r := floorShare(s.Reserve, n); r > 0 {
				bl.reserve[caller] = r
				bl.reserved = append(bl.reserved, caller)
				total += r
			}
			if s.Cap != nil {
				bl.cap[caller] = floorShare(*s.Cap, n)
			}
		}
		sort.Strings(bl.reserved)
		bl.pool = max(0, n-total)
		out = append(out, bl)
	}
	return out
}

// floorShare is floor(f x n) as decimals mean it: 0.57 x 2500 is 1425,
// although the binary product is 1424.99999...
func floorShare(f float64, n int) int {
	return int(math.Floor(f*float64(n) + 1e-9))
}

func (l *budgetLimit) scope() string {
	if l.tenant {
		return "tenant"
	}
	return "route"
}

// windowRoute is the route a request counts under in l: "" for the tenant,
// the route name for scope route. Requests to no named route ("unmatched",
// paths outside every route) count only in tenant limits: their endpoints are
// unknown, and one window for all of them would be wrong.
func (l *budgetLimit) windowRoute(route string) (string, bool) {
	if l.tenant {
		return "", true
	}
	if route == "" || route == "unmatched" || route == "none" {
		return "", false
	}
	return route, true
}

func (l *budgetLimit) capOf(caller string) int {
	if c, ok := l.cap[caller]; ok {
		return c
	}
	return l.n
}

// callerView is what a window's counts mean for one caller.
func (l *budgetLimit) callerView(caller string, counts map[string]int) CallerWindow {
	u, r := counts[caller], l.reserve[caller]
	left := max(0, r-u) + max(0, l.pool-l.poolUsed(counts))
	cw := CallerWindow{Used: u, Reserved: r, Remaining: min(left, max(0, l.capOf(caller)-u))}
	if c, ok := l.cap[caller]; ok {
		cw.Cap = c
	}
	return cw
}

// poolUsed is P for the given counts.
func (l *budgetLimit) poolUsed(counts map[string]int) int {
	p := 0
	for c, u := range counts {
		p += max(0, u-l.reserve[c])
	}
	return p
}

// NewBudget builds the budget of cfg.upstream_budget; nil when it has no
// limits, so that a request costs nothing then. With rate_limit.backend:
// redis and d.Redis, the windows are shared by the fleet; otherwise they are
// this replica's at requests / replicas_hint. prev, the budget in force
// before a reload (nil at start), hands its local windows over. routes are
// the route names GET /budget reports route-scope windows for.
func NewBudget(cfg *config.Config, routes []string, now func() time.Time, d Deps, prev Budget) Budget {
	if len(cfg.UpstreamBudget.Limits) == 0 {
		return nil
	}
	if d.Metrics != nil {
		d.Metrics.startBudgetSeries(cfg)
	}
	hint := max(1, cfg.RateLimit.ReplicasHint)
	var prevLocal *LocalBudget
	switch p := prev.(type) {
	case *LocalBudget:
		prevLocal = p
	case *RedisBudget:
		prevLocal = p.local
	}
	if cfg.RateLimit.Backend != "redis" || d.Redis == nil {
		local := newLocalBudget(compileLimits(cfg.UpstreamBudget, hint), now, d.Metrics)
		if prevLocal != nil {
			local.inherit(prevLocal)
		}
		return local
	}
	rb := NewRedisBudget(RedisBudgetOptions{
		Client: d.Redis, KeyPrefix: cfg.Redis.KeyPrefix, Budget: cfg.UpstreamBudget, ReplicasHint: hint,
		Now: now, Timeout: d.Timeout, Metrics: d.Metrics, Logger: d.Logger, Routes: routes, Tracer: d.Tracer,
	})
	if _, wasShared := prev.(*RedisBudget); wasShared && prevLocal != nil {
		rb.local.inherit(prevLocal)
	}
	return rb
}
