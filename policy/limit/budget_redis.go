package limit

// The shared upstream budget (upstream_budget with rate_limit.backend:
// redis).
//
// Each window is two keys: a sorted set of the admitted requests (member
// "caller|unique id", score the Redis server time in microseconds) and a hash
// of per-caller counts. One Lua script per request trims every window that
// covers it, decides (budget.go's rule) and, when all admit, records the
// request in all of them: one round trip, atomic across windows, on Redis's
// clock. All budget keys carry the hash tag {budget} so that a request's
// windows sit in one Redis Cluster slot. Keys expire one window after their
// last entry.
//
// When Redis fails or is slow, the replica decides locally at
// requests / replicas_hint, counts faxgate_upstream_budget_fallback_total,
// and tries Redis again after a cooldown, as the shared rate limiter does.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/config"
)

// budgetScript decides one request. KEYS are pairs (sorted set, hash), one
// per window. ARGV: caller, unique id, window count, then per window: per
// (us), N, U, R_c, C_c, k, and k pairs (reserved caller, its R). It returns
// {allowed, retry_after_us, refusing window (1-based, 0 when allowed),
// capped (1 when the caller's cap, not the pool, sets the refusing window's
// time), used_1, ..., used_n} with each window's use after the decision.
var budgetScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local caller = ARGV[1]
local member = caller .. '|' .. ARGV[2]
local nw = tonumber(ARGV[3])
local a = 4
local allowed, retry, refused, rcap = 1, 0, 0, 0
local used = {}
local pers = {}
local function owner(m) return string.match(m, '^(.*)|') end
for w = 1, nw do
  local z, h = KEYS[2*w-1], KEYS[2*w]
  local per, n, pool, res, cap, closed, k = tonumber(ARGV[a]), tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4]), tonumber(ARGV[a+5]), tonumber(ARGV[a+6])
  a = a + 7
  local reserve = {}
  for j = 1, k do reserve[ARGV[a]] = tonumber(ARGV[a+1]); a = a + 2 end
  pers[w] = per
  local old = redis.call('ZRANGEBYSCORE', z, '-inf', now - per)
  for _, m in ipairs(old) do
    local c = owner(m)
    if redis.call('HINCRBY', h, c, -1) <= 0 then redis.call('HDEL', h, c) end
  end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', z, '-inf', now - per) end
  local total = redis.call('ZCARD', z)
  used[w] = total
  local mine = tonumber(redis.call('HGET', h, caller)) or 0
  local counts = {}
  local within = 0
  for c, r in pairs(reserve) do
    local u = tonumber(redis.call('HGET', h, c)) or 0
    counts[c] = u
    within = within + math.min(u, r)
  end
  local capped = mine >= cap
  local pooled = mine >= (reserve[caller] or 0) and (closed == 1 or (total - within) >= pool)
  if capped or pooled then
    local wr = per
    local wc = capped and cap < n
    local need = mine - cap + 1
    local cap_found, pool_found = not capped, not pooled
    local start = 0
    -- Bounded: a refusal must stay cheap however full the window is. Past
    -- the bound the answer is per, the most any entry can take to leave.
    while not (cap_found and pool_found) and start < total and start < 4096 do
      local batch = redis.call('ZRANGE', z, start, start + 255, 'WITHSCORES')
      for i = 1, #batch, 2 do
        local c = owner(batch[i])
        local exp = tonumber(batch[i+1]) + per - now
        if not cap_found and c == caller then
          need = need - 1
          if need == 0 then cap_found = true; wr = exp end
        end
        if not pool_found and (c == caller or (counts[c] or tonumber(redis.call('HGET', h, c)) or 0) > (reserve[c] or 0)) then
          pool_found = true
          if not capped or exp >= wr then wc = false end
          if not capped or exp > wr then wr = exp end
        end
        if cap_found and pool_found then break end
      end
      start = start + 256
    end
    if allowed == 1 or wr > retry then
      retry = wr; refused = w
      if wc then rcap = 1 else rcap = 0 end
    end
    allowed = 0
  end
end
if allowed == 1 then
  for w = 1, nw do
    local z, h = KEYS[2*w-1], KEYS[2*w]
    redis.call('ZADD', z, now, member)
    redis.call('HINCRBY', h, caller, 1)
    local ttl = math.ceil(pers[w] / 1000) + 1000
    redis.call('PEXPIRE', z, ttl)
    redis.call('PEXPIRE', h, ttl)
    used[w] = used[w] + 1
  end
end
local out = {allowed, math.max(0, math.ceil(retry)), refused, rcap}
for w = 1, nw do out[#out+1] = used[w] end
return out
`)

// budgetStatusScript reads windows for GET /budget: KEYS are (sorted set,
// hash) pairs, ARGV each window's per (us). It trims, then returns per
// window a flat list {caller, count, ...} as one array of arrays.
var budgetStatusScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for w = 1, #ARGV do
  local z, h = KEYS[2*w-1], KEYS[2*w]
  local per = tonumber(ARGV[w])
  local old = redis.call('ZRANGEBYSCORE', z, '-inf', now - per)
  for _, m in ipairs(old) do
    local c = string.match(m, '^(.*)|')
    if redis.call('HINCRBY', h, c, -1) <= 0 then redis.call('HDEL', h, c) end
  end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', z, '-inf', now - per) end
  out[w] = redis.call('HGETALL', h)
end
return out
`)

// RedisBudgetOptions configures a RedisBudget.
type RedisBudgetOptions struct {
	Client    redis.UniversalClient
	KeyPrefix string
	Budget    config.UpstreamBudget
	// ReplicasHint divides each limit while Redis is unreachable.
	ReplicasHint int
	// Now is the clock of the local fallback; shared windows use Redis's.
	Now     func() time.Time
	Timeout time.Duration // one decision; default DefaultRedisRateTimeout
	Metrics *Metrics
	Logger  *zap.Logger
	// Routes are the route names GET /budget reports route-scope windows for.
	Routes []string
	// Tracer records each decision asked of Redis as a span
	// "budget.redis" (docs/tracing.md). Default: none.
	Tracer trace.Tracer
}

// RedisBudget shares the budget's windows across the fleet through Redis,
// falling back to a LocalBudget while Redis is unreachable.
type RedisBudget struct {
	client  redis.UniversalClient
	prefix  string
	limits  []*budgetLimit
	local   *LocalBudget
	timeout time.Duration
	now     func() time.Time
	log     *zap.Logger
	met     *Metrics
	fallbk  prometheus.Counter
	routes  []string

	idPrefix string
	seq      atomic.Uint64
	redis    redisFallback
}

var _ Budget = (*RedisBudget)(nil)

// NewRedisBudget builds the shared budget; it does not contact Redis.
func NewRedisBudget(o RedisBudgetOptions) *RedisBudget {
	sharedDefaults(&o.Now, &o.Timeout, &o.Metrics, &o.Logger)
	var id [6]byte
	_, _ = rand.Read(id[:])
	return &RedisBudget{
		client: o.Client, prefix: o.KeyPrefix, limits: compileLimits(o.Budget, 1),
		local:   newLocalBudget(compileLimits(o.Budget, max(1, o.ReplicasHint)), o.Now, o.Metrics),
		timeout: o.Timeout, now: o.Now, log: o.Logger, met: o.Metrics,
		fallbk:   o.Metrics.BudgetFallback,
		routes:   o.Routes,
		idPrefix: hex.EncodeToString(id[:]) + "-",
		redis: redisFallback{timeout: o.Timeout, log: o.Logger,
			upMsg:      "Redis answers again: the upstream budget is shared by the fleet again",
			downMsg:    "Redis unreachable or too slow: the upstream budget is enforced locally at requests / replicas_hint",
			downFields: []zap.Field{zap.Duration("retry_every", redisRateCooldown)},
			tracer:     o.Tracer, spanName: "budget.redis"},
	}
}

func (b *RedisBudget) keys(l *budgetLimit, route string) (z, h string) {
	base := b.prefix + "{budget}:" + l.name + ":" + route
	return base + ":z", base + ":h"
}

// Admit implements Budget: one script, or the local fallback.
func (b *RedisBudget) Admit(ctx context.Context, caller, route string, reserveOnly []string) BudgetDecision {
	return decideShared(&b.redis, ctx, b.now(), b.fallbk,
		func(ctx context.Context) (BudgetDecision, error) { return b.decide(ctx, caller, route, reserveOnly) },
		func() BudgetDecision { return b.local.Admit(ctx, caller, route, reserveOnly) },
		// The caller went away: nothing will be forwarded, so nothing is
		// counted anywhere.
		func() BudgetDecision { return BudgetDecision{Limit: "none", RetryAfter: time.Second} })
}

func (b *RedisBudget) decide(ctx context.Context, caller, route string, reserveOnly []string) (BudgetDecision, error) {
	var applied []*budgetLimit
	var routes []string
	keys := make([]string, 0, 2*len(b.limits))
	args := make([]any, 0, 3+9*len(b.limits))
	args = append(args, caller, b.idPrefix+strconv.FormatUint(b.seq.Add(1), 36), 0)
	for _, l := range b.limits {
		r, ok := l.windowRoute(route)
		if !ok {
			continue
		}
		z, h := b.keys(l, r)
		keys = append(keys, z, h)
		closed := 0
		if len(reserveOnly) > 0 && l.closedTo(r, reserveOnly) {
			closed = 1
		}
		args = append(args, l.per.Microseconds(), l.n, l.pool, l.reserve[caller], l.capOf(caller), closed, len(l.reserved))
		for _, c := range l.reserved {
			args = append(args, c, l.reserve[c])
		}
		applied, routes = append(applied, l), append(routes, r)
	}
	if len(applied) == 0 {
		return BudgetDecision{Allowed: true}, nil
	}
	args[2] = len(applied)
	v, err := budgetScript.Run(ctx, b.client, keys, args...).Int64Slice()
	if err != nil {
		return BudgetDecision{}, err
	}
	if len(v) != 4+len(applied) {
		return BudgetDecision{}, fmt.Errorf("budget script returned %d values, want %d", len(v), 4+len(applied))
	}
	now := b.now()
	for i, l := range applied {
		b.met.observeWindow(l.name, routes[i], float64(v[4+i])/float64(l.n), now)
		if v[0] == 1 {
			b.met.BudgetSpent.WithLabelValues(caller, l.name).Inc()
		}
	}
	if v[0] == 1 {
		return BudgetDecision{Allowed: true}, nil
	}
	d := BudgetDecision{RetryAfter: max(time.Duration(v[1])*time.Microsecond, time.Millisecond)}
	if i := int(v[2]) - 1; i >= 0 && i < len(applied) {
		d.Limit, d.Window, d.Capped = applied[i].name, routes[i], v[3] == 1
	}
	return d, nil
}

// Status implements Budget: the shared windows of every limit (route-scope
// windows of the routes given at construction, where they have entries), or
// the local view while Redis is unreachable.
func (b *RedisBudget) Status(ctx context.Context) BudgetStatus {
	return b.status(ctx, b.routes)
}

func (b *RedisBudget) status(ctx context.Context, routes []string) BudgetStatus {
	type win struct {
		l     *budgetLimit
		route string
	}
	var wins []win
	for _, l := range b.limits {
		if l.tenant {
			wins = append(wins, win{l, ""})
			continue
		}
		for _, r := range routes {
			wins = append(wins, win{l, r})
		}
	}
	keys := make([]string, 0, 2*len(wins))
	args := make([]any, 0, len(wins))
	for _, w := range wins {
		z, h := b.keys(w.l, w.route)
		keys = append(keys, z, h)
		args = append(args, w.l.per.Microseconds())
	}
	ctx, cancel := context.WithTimeout(ctx, 10*b.timeout)
	defer cancel()
	res, err := budgetStatusScript.Run(ctx, b.client, keys, args...).Slice()
	if err != nil || len(res) != len(wins) {
		st := b.local.Status(ctx)
		return st
	}
	st := BudgetStatus{Backend: "redis"}
	byLimit := map[string]*LimitStatus{}
	for _, l := range b.limits {
		st.Limits = append(st.Limits, LimitStatus{Name: l.name, Scope: l.scope(), Requests: l.requests, Effective: l.n,
			Per: l.per.String(), Windows: []WindowStatus{}})
	}
	for i := range st.Limits {
		byLimit[st.Limits[i].Name] = &st.Limits[i]
	}
	for i, w := range wins {
		flat, _ := res[i].([]any)
		counts := map[string]int{}
		for j := 0; j+1 < len(flat); j += 2 {
			c, _ := flat[j].(string)
			n, _ := strconv.Atoi(fmt.Sprint(flat[j+1]))
			if n > 0 {
				counts[c] = n
			}
		}
		if len(counts) == 0 && !w.l.tenant {
			continue
		}
		ls := byLimit[w.l.name]
		ls.Windows = append(ls.Windows, w.l.windowStatus(w.route, counts))
	}
	return st
}
