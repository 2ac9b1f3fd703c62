package tokencache

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
)

// The fleet protocol (token.store: redis). Only the renewal loop runs it; the
// hot path reads the local copy and never waits on the store.
//
//  1. After a 401, delete the rejected token from the store if it is still
//     there (compare-and-delete: a late 401 never discards a newer token).
//  2. Load the shared token. Adopt it when it is valid, newer than ours, not
//     itself due for renewal, and issued after the rejected one (a failover
//     may have left an older token in the store).
//  3. Otherwise take the renewal lease. The holder loads once more (another
//     replica may have just finished), calls the token endpoint while
//     extending the lease, saves and publishes the new token, and releases.
//  4. A replica that finds the lease busy waits for the holder's token
//     (update notices, polling with backoff). A holder that died is replaced
//     once its lease expires; the current token serves meanwhile.
//  5. Any store error: renew directly (still single-flight in this process),
//     and write the token back when the store answers again.

// storeWarnEvery rate-limits the warning logged for store errors.
const storeWarnEvery = 30 * time.Second

// fleetState is the manager's shared-store bookkeeping, guarded by Manager.mu
// except where noted.
type fleetState struct {
	updates      <-chan struct{} // owned by the renewal loop
	syncAt       time.Time
	syncFailures int
	warnMu       sync.Mutex
	lastWarn     map[string]time.Time
}

func (m *Manager) renewShared(ctx context.Context, rejected *Token) (*Token, string, error) {
	sh := m.opts.Shared
	if rejected != nil {
		if _, err := sh.DeleteIf(ctx, rejected); err != nil {
			m.storeErr("delete", err)
			return m.renewDirect(ctx, rejected)
		}
	}
	deadline := m.opts.Clock.Now().Add(2 * m.opts.LeaseTTL)
	poll := 50 * time.Millisecond
	for {
		tok, err := sh.Load(ctx)
		if err != nil {
			m.storeErr("load", err)
			return m.renewDirect(ctx, rejected)
		}
		if m.adoptableLocked(tok, rejected) {
			return tok, "redis", nil
		}
		lease, ok, err := sh.Lease(ctx, m.opts.LeaseTTL)
		if err != nil {
			m.opts.Metrics.Lease.WithLabelValues("error").Inc()
			m.storeErr("lease", err)
			return m.renewDirect(ctx, rejected)
		}
		if ok {
			m.opts.Metrics.Lease.WithLabelValues("acquired").Inc()
			return m.renewUnderLease(ctx, lease, rejected)
		}
		m.opts.Metrics.Lease.WithLabelValues("busy").Inc()
		if !m.opts.Clock.Now().Before(deadline) {
			m.log.Warn("the renewal lease stayed busy without a new token appearing; renewing directly")
			return m.renewDirect(ctx, rejected)
		}
		timer := m.opts.Clock.NewTimer(poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, "", ctx.Err()
		case <-m.fleet.updates:
			timer.Stop()
		case <-timer.C():
		}
		poll = min(2*poll, time.Second)
	}
}

// renewUnderLease calls the token endpoint while holding the lease.
func (m *Manager) renewUnderLease(ctx context.Context, lease Lease, rejected *Token) (*Token, string, error) {
	sh := m.opts.Shared
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := lease.Release(rctx); err != nil {
			m.storeErr("release", err)
		}
	}()
	// Another replica may have saved a token between our load and our lease.
	if tok, err := sh.Load(ctx); err == nil && m.adoptableLocked(tok, rejected) {
		return tok, "redis", nil
	}
	stop := make(chan struct{})
	extended := make(chan struct{})
	go m.keepLease(ctx, lease, stop, extended)
	tok, err := m.fetch(ctx)
	close(stop)
	<-extended
	if err != nil {
		return nil, "", err
	}
	tok.By401 = rejected != nil // set before Save publishes tok
	if _, err := sh.Save(ctx, tok); err != nil {
		m.storeErr("save", err)
		m.markUnsynced(tok)
	}
	return tok, "upstream", nil
}

// keepLease extends the lease every third of its TTL until stop closes.
func (m *Manager) keepLease(ctx context.Context, lease Lease, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	// A store bug must not take the process down; the renewal goes on
	// without the extension, like after a lost lease.
	defer background.Guard(m.log, m.opts.Panics, "token_lease", "the lease is no longer extended", nil)
	for {
		timer := m.opts.Clock.NewTimer(m.opts.LeaseTTL / 3)
		select {
		case <-stop:
			timer.Stop()
			return
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
		ok, err := lease.Extend(ctx, m.opts.LeaseTTL)
		switch {
		case err != nil:
			m.storeErr("extend", err)
		case !ok:
			// Someone else may now renew too; our token is still good, so carry on.
			m.opts.Metrics.Lease.WithLabelValues("lost").Inc()
			return
		}
	}
}

// renewDirect renews without the store, and remembers to write the token back.
func (m *Manager) renewDirect(ctx context.Context, rejected *Token) (*Token, string, error) {
	tok, err := m.fetch(ctx)
	if err != nil {
		return nil, "", err
	}
	tok.By401 = rejected != nil // set before anyone else can see tok
	m.markUnsynced(tok)
	return tok, "upstream", nil
}

// adoptableLocked takes m.mu and reports whether tok should replace ours.
func (m *Manager) adoptableLocked(tok, rejected *Token) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.adoptable(tok, rejected)
}

// adoptable: valid, issued after the rejected token, newer than ours, and
// not itself due for renewal (then this replica renews it). m.mu must be
// held.
func (m *Manager) adoptable(tok, rejected *Token) bool {
	now := m.opts.Clock.Now()
	if tok == nil || !tok.Valid(now) {
		return false
	}
	// A 401 may arrive while a scheduled renewal is already under way: the
	// rejected token must not come back from the store either way. Nor may
	// one older than it: a failover that lost the last writes can leave the
	// store holding a token the fleet had replaced, one the upstream may
	// have revoked since (docs/tokens.md, Redis failover).
	for _, r := range []*Token{rejected, m.rejected} {
		if r != nil && (tok.Value.Equal(r.Value) || !tok.Issued.After(r.Issued)) {
			return false
		}
	}
	if cur := m.cur.Load(); cur != nil && !tok.Expiry.After(cur.Expiry) {
		return false
	}
	before := min(m.opts.RefreshBefore, tok.Lifetime()/2)
	return now.Before(tok.Expiry.Add(-before))
}

// adoptShared reads the store after an update notice and takes a newer
// token into use. It reports whether it did.
func (m *Manager) adoptShared(ctx context.Context) bool {
	tok, err := m.opts.Shared.Load(ctx)
	if err != nil {
		m.storeErr("load", err)
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.adoptable(tok, m.rejected) {
		return false
	}
	m.install(tok, "redis")
	m.broadcast()
	return true
}

func (m *Manager) markUnsynced(tok *Token) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unsynced = tok
	m.fleet.syncFailures = 0
	m.fleet.syncAt = m.opts.Clock.Now().Add(time.Second)
	m.opts.Metrics.Unsynced.Set(1)
}

func (m *Manager) syncDue() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unsynced != nil && !m.opts.Clock.Now().Before(m.fleet.syncAt)
}

// writeBack saves a token renewed during an outage; the store keeps a
// later-expiring token if another replica wrote one meanwhile.
func (m *Manager) writeBack(ctx context.Context) {
	m.mu.Lock()
	tok := m.unsynced
	m.mu.Unlock()
	if tok == nil {
		return
	}
	_, err := m.opts.Shared.Save(ctx, tok)
	if err != nil {
		m.storeErr("save", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.fleet.syncFailures++
		d := min(time.Second<<min(m.fleet.syncFailures, 5), 30*time.Second)
		m.fleet.syncAt = m.opts.Clock.Now().Add(d)
		return
	}
	if m.unsynced == tok {
		m.unsynced = nil
		m.opts.Metrics.Unsynced.Set(0)
		m.log.Info("shared token store reachable again; token written back")
	}
}

// storeErr counts a store failure and warns at most every storeWarnEvery per operation.
func (m *Manager) storeErr(op string, err error) {
	m.opts.Metrics.StoreErrors.WithLabelValues(op).Inc()
	now := m.opts.Clock.Now()
	m.fleet.warnMu.Lock()
	if m.fleet.lastWarn == nil {
		m.fleet.lastWarn = map[string]time.Time{}
	}
	last, seen := m.fleet.lastWarn[op]
	warn := !seen || now.Sub(last) >= storeWarnEvery
	if warn {
		m.fleet.lastWarn[op] = now
	}
	m.fleet.warnMu.Unlock()
	if warn {
		m.log.Warn("shared token store unavailable; serving the local token", zap.String("op", op), zap.Error(err))
	}
}
