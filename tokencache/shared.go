package tokencache

import (
	"context"
	"time"
)

// Shared is where replicas share one token (token.store: redis). The manager
// consults it only off the hot path: at start-up, when its local copy nears
// renewal, and after an upstream 401.
type Shared interface {
	// Load returns the shared token, or nil when there is none or it cannot
	// be opened with the current API secret.
	Load(ctx context.Context) (*Token, error)
	// Save publishes tok to every replica, unless the store already holds a
	// token that expires later. It reports whether tok was written.
	Save(ctx context.Context, tok *Token) (bool, error)
	// DeleteIf removes the shared token only if it is still tok, so a late
	// 401 never discards a newer token. It reports whether it deleted.
	DeleteIf(ctx context.Context, tok *Token) (bool, error)
	// Lease tries to take the fleet-wide renewal lease for ttl; ok is false
	// when another replica holds it.
	Lease(ctx context.Context, ttl time.Duration) (l Lease, ok bool, err error)
	// Updates signals (best effort) whenever a replica saves a token; the
	// channel is closed when ctx ends.
	Updates(ctx context.Context) <-chan struct{}
}

// Lease is the right to renew the shared token, held by one replica.
type Lease interface {
	// Extend keeps the lease for another ttl; false means it was lost.
	Extend(ctx context.Context, ttl time.Duration) (bool, error)
	// Release gives the lease up, only if still held by this owner.
	Release(ctx context.Context) error
}
