package redisconn

// The owner lease: one key whose value is a random token naming its holder,
// with a TTL. The token store's renewal lease (tokencache) and the ACME
// storage's locks (internal/certstore) are both this, one script each for
// taking, refreshing and releasing it, so they behave alike on every
// topology.
//
// Replication is asynchronous: a failover (or a restart without
// persistence) can lose the key while its holder still works. Refresh then
// sets it again for its holder, unless another holder took it meanwhile, so
// a lease survives the failover that lost it and a second replica does not
// start the same work. Redis cannot promise more: between the loss and the
// next refresh another replica may take the key, and then the holder learns
// at its next refresh that it has lost the lease.

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Refreshed is what RefreshLease found.
type Refreshed int

// RefreshLease's results.
const (
	// LeaseLost: another holder's token is in the key.
	LeaseLost Refreshed = iota
	// LeaseExtended: the holder's token was there; its TTL is renewed.
	LeaseExtended
	// LeaseRetaken: the key had vanished (a failover or a restart lost
	// it) and is set again for the holder.
	LeaseRetaken
)

// refreshScript extends the lease of the holder ARGV[1] to ARGV[2] ms: 1
// when extended, 2 when the key had vanished and was set again, 0 when
// another holder has it. KEYS[1] is the lease.
var refreshScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
`)

// releaseScript deletes the lease only if ARGV[1] holds it.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// leaseTTL keeps a TTL within what SET PX accepts.
func leaseTTL(ttl time.Duration) time.Duration { return max(ttl, time.Millisecond) }

// TakeLease sets key to owner for ttl unless another holder has it (SET
// NX PX), and reports whether it did.
func TakeLease(ctx context.Context, c redis.UniversalClient, key, owner string, ttl time.Duration) (bool, error) {
	return c.SetNX(ctx, key, owner, leaseTTL(ttl)).Result()
}

// RefreshLease renews owner's lease on key for ttl from now, taking the
// key back when it vanished.
func RefreshLease(ctx context.Context, c redis.UniversalClient, key, owner string, ttl time.Duration) (Refreshed, error) {
	n, err := refreshScript.Run(ctx, c, []string{key}, owner, leaseTTL(ttl).Milliseconds()).Int()
	if err != nil {
		return LeaseLost, err
	}
	return Refreshed(n), nil
}

// ReleaseLease deletes key if owner holds it, and reports whether it did;
// a lease that ran out and was taken by another holder is left alone.
func ReleaseLease(ctx context.Context, c redis.UniversalClient, key, owner string) (bool, error) {
	n, err := releaseScript.Run(ctx, c, []string{key}, owner).Int()
	return n == 1, err
}
