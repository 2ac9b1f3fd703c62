package limit

// Retry-After holds (upstream_budget.honor_retry_after,
// docs/upstream-budget.md).
//
// An upstream 429 on a route holds that route: until its Retry-After passes,
// callers get 429 upstream_throttled and nothing is sent upstream. With Redis,
// the replica that saw the 429 writes the hold into one hash
// (P + "holds": route -> end, in Redis time) and publishes it on
// P + "holds"; every replica applies a published hold at once and polls the
// hash twice a second (a read-only script on the hash's node), so a hold reaches the fleet within a second even across
// a lost message or a reconnect. Holds travel as time left, never as a
// wall-clock instant, so replicas' clocks may disagree. Without Redis (or
// while it is down) each replica holds on its own.

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
)

// holdScript records a hold of ARGV[2] ms on route ARGV[1] unless a longer
// one stands, drops ended holds, and publishes it. KEYS[1] is the hash,
// KEYS[2] the channel name (a key only for cluster routing).
var holdScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local d = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1])) or 0
if cur < now + d then redis.call('HSET', KEYS[1], ARGV[1], now + d) end
local all = redis.call('HGETALL', KEYS[1])
local last = 0
for i = 1, #all, 2 do
  local u = tonumber(all[i+1])
  if u <= now then redis.call('HDEL', KEYS[1], all[i]) elseif u > last then last = u end
end
if last > now then redis.call('PEXPIRE', KEYS[1], last - now) end
redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' ' .. d)
return 1
`)

// holdsScript returns {route, ms left, ...} for every standing hold, the
// time left read on the clock of the node that holds the hash (in Redis
// Cluster a TIME sent alone may go to another node, with another clock). It
// only reads, so it runs as EVALSHA_RO (Redis 7).
var holdsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local left = tonumber(all[i+1]) - now
  if left > 0 then out[#out+1] = all[i]; out[#out+1] = left end
end
return out
`)

// HoldOptions configures Holds.
type HoldOptions struct {
	// Client shares holds with the fleet; nil holds locally only.
	Client redis.UniversalClient
	// KeyPrefix is redis.key_prefix.
	KeyPrefix string
	Now       func() time.Time
	Logger    *zap.Logger
	// PollEvery is how often the shared holds are read; default 500ms, so
	// that a poll plus its round trip stays within the second a hold has
	// to reach the fleet when its message is lost (a subscription moving
	// to a new primary after a failover).
	PollEvery time.Duration
	// Timeout bounds one Redis call; default 1s.
	Timeout time.Duration
	// Panics counts the panics recovered in the publishing and polling
	// (faxgate_background_panics_total); nil counts nothing.
	Panics background.Counter
}

// Holds is the table of routes held after an upstream 429. It lives as long
// as the gateway, across config reloads.
type Holds struct {
	o   HoldOptions
	key string
	ch  string

	// latest is the end of the latest hold anywhere (Unix ns), so the hot
	// path answers "no hold" with one atomic load.
	latest atomic.Int64
	mu     sync.RWMutex
	until  map[string]time.Time // every route held at least once
}

// NewHolds builds the table; Run shares it with the fleet.
func NewHolds(o HoldOptions) *Holds {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 500 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	return &Holds{o: o, key: o.KeyPrefix + "holds", ch: o.KeyPrefix + "holds", until: map[string]time.Time{}}
}

// Held reports how long route is still held; ok is false when it is not.
func (h *Holds) Held(route string) (left time.Duration, ok bool) {
	now := h.o.Now()
	if now.UnixNano() >= h.latest.Load() {
		return 0, false
	}
	h.mu.RLock()
	u, found := h.until[route]
	h.mu.RUnlock()
	if !found || !now.Before(u) {
		return 0, false
	}
	return u.Sub(now), true
}

// set holds route for d from now unless a longer hold stands.
func (h *Holds) set(route string, d time.Duration) {
	u := h.o.Now().Add(d)
	h.mu.Lock()
	if u.After(h.until[route]) {
		h.until[route] = u
	}
	if n := u.UnixNano(); n > h.latest.Load() {
		h.latest.Store(n)
	}
	h.mu.Unlock()
}

// Hold holds route for d here at once and, with Redis, for the fleet. The
// shared write runs in the background (bounded by the timeout), so the 429
// that caused it is relayed without waiting.
func (h *Holds) Hold(route string, d time.Duration) {
	if d <= 0 {
		return
	}
	h.set(route, d)
	if h.o.Client == nil {
		return
	}
	go func() {
		defer background.Guard(h.o.Logger, h.o.Panics, "upstream_hold_publish", "the hold stays local", nil)
		ctx, cancel := context.WithTimeout(context.Background(), h.o.Timeout)
		defer cancel()
		if err := holdScript.Run(ctx, h.o.Client, []string{h.key, h.ch}, route, d.Milliseconds()).Err(); err != nil {
			h.o.Logger.Warn("could not share an upstream 429 hold with the fleet; it holds this replica only",
				zap.String("route", route), zap.Error(err))
		}
	}()
}

// Each calls yield with every route held at least once and the seconds left
// on its hold (0 once over): faxgate_upstream_hold_seconds.
func (h *Holds) Each(yield func(route string, left float64)) {
	now := h.o.Now()
	h.mu.RLock()
	defer h.mu.RUnlock()
	for r, u := range h.until {
		yield(r, max(0, u.Sub(now).Seconds()))
	}
}

// Standing returns the routes held now with the time left.
func (h *Holds) Standing() map[string]time.Duration {
	now := h.o.Now()
	out := map[string]time.Duration{}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for r, u := range h.until {
		if now.Before(u) {
			out[r] = u.Sub(now)
		}
	}
	return out
}

// Run applies the fleet's holds until ctx ends: published ones at once, and
// the shared table every PollEvery. Without Redis it returns at once.
func (h *Holds) Run(ctx context.Context) {
	if h.o.Client == nil {
		return
	}
	ps := h.o.Client.Subscribe(ctx, h.ch)
	defer ps.Close()
	msgs := ps.Channel()
	tick := time.NewTicker(h.o.PollEvery)
	defer tick.Stop()
	h.poll(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			h.apply(m.Payload)
		case <-tick.C:
			h.poll(ctx)
		}
	}
}

// apply takes a published "route ms" hold.
func (h *Holds) apply(payload string) {
	route, ms, ok := strings.Cut(payload, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n <= 0 || route == "" {
		return
	}
	h.set(route, time.Duration(n)*time.Millisecond)
}

func (h *Holds) poll(ctx context.Context) {
	defer background.Guard(h.o.Logger, h.o.Panics, "upstream_hold_poll", "the next poll tries again", nil)
	ctx, cancel := context.WithTimeout(ctx, h.o.Timeout)
	defer cancel()
	v, err := holdsScript.RunRO(ctx, h.o.Client, []string{h.key}).Slice()
	if err != nil && strings.Contains(err.Error(), "unknown command") {
		// Redis before 7 has no EVALSHA_RO.
		v, err = holdsScript.Run(ctx, h.o.Client, []string{h.key}).Slice()
	}
	if err != nil {
		return // Redis down: each replica holds on its own meanwhile
	}
	for i := 0; i+1 < len(v); i += 2 {
		route, _ := v[i].(string)
		left, _ := v[i+1].(int64)
		if route != "" && left > 0 {
			h.set(route, time.Duration(left)*time.Millisecond)
		}
	}
}

// RetryAfter is how long an upstream 429 holds its route: the Retry-After
// header as delta-seconds or an HTTP date (read against now), 1 s when absent,
// unreadable or already past, and at most maxHold.
func RetryAfter(header string, now time.Time, maxHold time.Duration) time.Duration {
	d := time.Second
	header = strings.TrimSpace(header)
	if n, err := strconv.ParseInt(header, 10, 64); err == nil {
		if n > 0 {
			d = time.Duration(min(n, int64(maxHold/time.Second)+1)) * time.Second
		}
	} else if t, err := http.ParseTime(header); err == nil {
		if t.After(now) {
			d = t.Sub(now)
		}
	}
	return min(d, maxHold)
}
