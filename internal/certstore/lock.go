package certstore

// Locks: SET NX PX with a random token naming the holder; refresh and
// release compare the token in Lua, so a holder whose lease ran out and was
// taken by another replica can neither extend nor delete the new holder's
// lock.
//
// A goroutine refreshes a held lock every third of its lease. It keeps
// trying through Redis errors (a restart, a failover, a timeout) for as
// long as the lease it last confirmed lasts, because giving up on the first
// error, as several public certmagic storages did, lets the lease lapse
// while the holder still works, and a second replica orders the same
// certificate. It stops only when the lease is truly gone: another holder's
// token is in the key, or the lease's end has passed without a successful
// refresh.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/redisconn"
)

// heldLock is a lock this process holds.
type heldLock struct {
	key   string
	token string
	stop  chan struct{} // closed by Unlock
	done  chan struct{} // closed when the refresher has returned

	// op serialises the refresher's and RenewLockLease's calls to Redis,
	// so that a refresh with the old lease cannot shorten a renewed one.
	op sync.Mutex

	mu      sync.Mutex
	lease   time.Duration // what each refresh extends the lease to
	expires time.Time     // end of the lease Redis last confirmed, by our clock
	gone    bool          // lost: never refresh (or re-create) it again
}

func (h *heldLock) state() (lease time.Duration, expires time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease, h.expires
}

func (h *heldLock) isGone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gone
}

// confirmed records a successful refresh sent at sent with lease.
func (h *heldLock) confirmed(sent time.Time, lease time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lease, h.expires = lease, sent.Add(lease)
}

// The lock is the owner lease of internal/base/redisconn: a refresh
// returns redisconn.LeaseRetaken when the key had vanished while the lease
// still ran (Redis restarted without persistence, or failed over to a
// replica that had not received it). The holder still holds the lock by its
// own lease (the refresher checks that the lease has not ended), so it
// takes the key back; had another replica taken the lock meanwhile, its
// token would be there and the refresh returns redisconn.LeaseLost.

// errLockLost is returned by RenewLockLease once another holder has the lock.
var errLockLost = errors.New("lock lease lost: another holder has it")

func (s *Storage) lockKey(name string) string { return s.locks + name }

// Lock implements certmagic.Locker. It waits, trying every LockPoll (with
// jitter, so that replicas do not move in step), until the lock is free or
// its holder's lease has run out, or until ctx is done. Redis errors while
// waiting are retried for one LockTTL (a restart or failover), then
// returned.
//
// The lock is held until Unlock, or until ctx is done: the refresher stops
// then and the lease runs out within LockTTL. certmagic keeps the context
// it locked with for its whole critical section and unlocks with a context
// that is not cancelled.
func (s *Storage) Lock(ctx context.Context, name string) error {
	var failingSince time.Time
	for {
		ok, err := s.TryLock(ctx, name)
		if ok {
			return nil
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			failingSince = time.Time{}
		case failingSince.IsZero():
			failingSince = time.Now()
		case time.Since(failingSince) >= s.lockTTL:
			return err
		}
		t := time.NewTimer(s.lockPoll + mrand.N(s.lockPoll/4+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// TryLock implements certmagic.TryLocker: one attempt, false when another
// holder has the lock. A lock taken is held as Lock's is.
func (s *Storage) TryLock(ctx context.Context, name string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return false, fmt.Errorf("certstore lock %q: %w", name, err)
	}
	h := &heldLock{
		key: s.lockKey(name), token: hex.EncodeToString(b[:]),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	sent := time.Now()
	octx, cancel := s.opCtx(ctx)
	ok, err := redisconn.TakeLease(octx, s.client, h.key, h.token, s.lockTTL)
	cancel()
	if err != nil {
		// Had the SET applied before the error, the key expires with its
		// lease: nobody refreshes it.
		return false, opError("lock", name, err)
	}
	if !ok {
		return false, nil
	}
	h.confirmed(sent, s.lockTTL)
	s.mu.Lock()
	s.held[name] = h
	s.mu.Unlock()
	s.log.Debug("certmagic lock acquired", zap.String("lock", name))
	go s.refresh(ctx, name, h)
	return true, nil
}

// Unlock implements certmagic.Locker. It releases the lock only if this
// Storage holds it under its own token: a lock this process does not hold,
// or whose lease it lost to another holder, is left alone.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	// The refresher must be gone before the key is deleted: a refresh after
	// the delete would find the key missing and set it again.
	close(h.stop)
	<-h.done
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	if _, err := redisconn.ReleaseLease(octx, s.client, h.key, h.token); err != nil {
		// The lease, no longer refreshed, ends within LockTTL.
		return opError("unlock", name, err)
	}
	s.log.Debug("certmagic lock released", zap.String("lock", name))
	return nil
}

// RenewLockLease implements certmagic.LockLeaseRenewer: the lease of a lock
// this Storage holds becomes leaseDuration (at least LockTTL) from now, and
// the refresher keeps extending it by that much. certmagic calls it before
// each retry of a long certificate order.
func (s *Storage) RenewLockLease(ctx context.Context, name string, leaseDuration time.Duration) error {
	s.mu.Lock()
	h := s.held[name]
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("certstore renew lock %q: not held", name)
	}
	lease := max(leaseDuration, s.lockTTL)
	h.op.Lock()
	defer h.op.Unlock()
	sent := time.Now()
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	r, err := redisconn.RefreshLease(octx, s.client, h.key, h.token, lease)
	if err != nil {
		return opError("renew lock", name, err)
	}
	if r == redisconn.LeaseLost {
		s.lost(name, h, "another holder has it")
		return fmt.Errorf("certstore renew lock %q: %w", name, errLockLost)
	}
	h.confirmed(sent, lease)
	return nil
}

// refresh keeps h's lease alive until Unlock, ctx's end, or the lease is
// truly lost.
func (s *Storage) refresh(ctx context.Context, name string, h *heldLock) {
	defer close(h.done)
	defer func() {
		// A panic must not take the process down; the lease then ends.
		if r := recover(); r != nil {
			s.log.Error("certmagic lock refresher panicked; the lease will run out",
				zap.String("lock", name), zap.Any("panic", r), zap.Stack("stack"))
		}
	}()
	interval := s.lockTTL / 3
	retry := max(interval/5, 10*time.Millisecond)
	wait := interval
	failures := 0
	var lastErr error
	for {
		t := time.NewTimer(wait)
		select {
		case <-h.stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			s.log.Info("certmagic lock no longer refreshed: its context ended without Unlock; the lease will run out",
				zap.String("lock", name))
			return
		case <-t.C:
		}

		h.op.Lock()
		if h.isGone() {
			h.op.Unlock()
			return
		}
		lease, expires := h.state()
		now := time.Now()
		if !now.Before(expires) {
			h.op.Unlock()
			s.lost(name, h, "the lease ended before a refresh succeeded", zap.NamedError("last_error", lastErr), zap.Int("failed_refreshes", failures))
			return
		}
		// A reply that comes after the lease's end proves nothing.
		octx, cancel := context.WithTimeout(ctx, min(s.opTimeout, expires.Sub(now)))
		r, err := redisconn.RefreshLease(octx, s.client, h.key, h.token, lease)
		cancel()
		switch {
		case err != nil:
			h.op.Unlock()
			failures++
			lastErr = redisconn.ScrubError(err)
			if failures == 1 {
				s.log.Warn("refreshing a certmagic lock failed; retrying until its lease ends",
					zap.String("lock", name), zap.Error(lastErr), zap.Duration("lease_left", expires.Sub(now)))
			}
			wait = retry
		case r == redisconn.LeaseLost:
			h.op.Unlock()
			s.lost(name, h, "another holder has it")
			return
		default:
			h.confirmed(now, lease)
			h.op.Unlock()
			if r == redisconn.LeaseRetaken {
				s.log.Warn("a certmagic lock's key had vanished from Redis (a restart without persistence, or a failover); set again while its lease lasts",
					zap.String("lock", name))
			}
			if failures > 0 {
				s.log.Info("refreshing a certmagic lock works again", zap.String("lock", name),
					zap.Int("failed_refreshes", failures))
			}
			failures, lastErr = 0, nil
			wait = interval
		}
	}
}

// lost forgets h: Unlock will not touch the key, which another holder may
// have now.
func (s *Storage) lost(name string, h *heldLock, reason string, fields ...zap.Field) {
	h.mu.Lock()
	h.gone = true
	h.mu.Unlock()
	s.mu.Lock()
	if s.held[name] == h {
		delete(s.held, name)
	}
	s.mu.Unlock()
	s.log.Error("certmagic lock lost; another replica may hold it now",
		append([]zap.Field{zap.String("lock", name), zap.String("reason", reason)}, fields...)...)
}
