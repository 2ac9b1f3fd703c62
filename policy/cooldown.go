package policy

import (
	"sync/atomic"
	"time"
)

// cooldown spaces the attempts to use a Redis that just failed: while it
// answers every decision goes to it; after a failure, decisions are made
// locally for redisRateCooldown, then one decision tries Redis again (and
// moves the next try a cooldown on), so an outage does not add the Redis
// timeout to every request. The shared rate limiter and the shared budget
// both use it.
type cooldown struct {
	retryAt atomic.Int64 // Unix ns when Redis may be tried again; 0 while it answers
}

// try reports whether this decision goes to Redis.
func (c *cooldown) try(now time.Time) bool {
	at := c.retryAt.Load()
	if at == 0 {
		return true
	}
	if now.UnixNano() < at {
		return false
	}
	return c.retryAt.CompareAndSwap(at, now.Add(redisRateCooldown).UnixNano())
}

// ok records an answer from Redis; it reports whether Redis had been failing.
func (c *cooldown) ok() bool {
	if c.retryAt.Load() == 0 {
		return false
	}
	c.retryAt.Store(0)
	return true
}

// failed records a failure at now.
func (c *cooldown) failed(now time.Time) {
	c.retryAt.Store(now.Add(redisRateCooldown).UnixNano())
}
