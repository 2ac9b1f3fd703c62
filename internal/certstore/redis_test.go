package certstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/certstore"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// client is the production client (internal/base/redisconn) for addrs.
func client(t *testing.T, addrs ...string) redis.UniversalClient {
	t.Helper()
	c, err := redisconn.New(config.Redis{Addrs: addrs}, redisconn.Passwords{}, redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.Client()
}

var namespaces atomic.Int64

// newPrefix gives each test its own key prefix on a shared server.
func newPrefix() string { return fmt.Sprintf("t%d:", namespaces.Add(1)) }

// store is a Storage with test timings: a lease of ttl, fast polling.
func store(c redis.UniversalClient, prefix string, ttl time.Duration, log *zap.Logger) *certstore.Storage {
	return certstore.New(certstore.Options{Client: c, KeyPrefix: prefix, Logger: log,
		LockTTL: ttl, LockPoll: 20 * time.Millisecond, OpTimeout: time.Second})
}

func redisOpener(c redis.UniversalClient) opener {
	return func(t *testing.T) (certmagic.Storage, certmagic.Storage) {
		p := newPrefix()
		return store(c, p, 2*time.Second, nil), store(c, p, 2*time.Second, nil)
	}
}

func TestConformanceRedis(t *testing.T) {
	srv := redistest.Start(t)
	conformance(t, redisOpener(client(t, srv.Addr)))
}

// TestKeyLayout: everything lives under redis.key_prefix + "certmagic/";
// a prefix holding glob characters matches only itself.
func TestKeyLayout(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.Addr)
	raw := srv.Client(t)
	ctx := context.Background()
	s := store(c, "fax*gate:", time.Second, nil)
	other := store(c, "faxXgate:", time.Second, nil) // matched by the unescaped glob
	mustStore(t, ctx, other, "a/other.txt", []byte("other"))
	mustStore(t, ctx, s, "a/b.txt", []byte("value"))
	if err := s.Lock(ctx, "name"); err != nil {
		t.Fatal(err)
	}
	defer s.Unlock(ctx, "name")
	if got, err := raw.HGet(ctx, "fax*gate:certmagic/data/a/b.txt", "v").Result(); err != nil || got != "value" {
		t.Errorf("HGET data key = %q, %v", got, err)
	}
	if got, err := raw.Get(ctx, "fax*gate:certmagic/locks/name").Result(); err != nil || len(got) != 32 {
		t.Errorf("lock key = %q, %v; want a 32-character token", got, err)
	}
	if got, err := s.List(ctx, "a", false); err != nil || len(got) != 1 || got[0] != "a/b.txt" {
		t.Errorf("List = %q, %v; want only this prefix's key", got, err)
	}
	// A key cannot climb out of its prefix.
	mustStore(t, ctx, s, "../../escape", []byte("x"))
	if n, _ := raw.Exists(ctx, "fax*gate:certmagic/data/escape").Result(); n != 1 {
		t.Errorf("../../escape was not kept under the prefix")
	}
}

// TestLockContention: three replicas take one lock over many rounds; never
// are two inside at once.
func TestLockContention(t *testing.T) {
	srv := redistest.Start(t)
	p := newPrefix()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const replicas, rounds = 3, 15
	var inside, overlaps, total atomic.Int32
	var wg sync.WaitGroup
	for range replicas {
		s := store(client(t, srv.Addr), p, time.Second, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := s.Lock(ctx, "issue_cert_example.com"); err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(2 * time.Millisecond) // models the work done under the lock
				inside.Add(-1)
				total.Add(1)
				if err := s.Unlock(ctx, "issue_cert_example.com"); err != nil {
					t.Errorf("Unlock: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || total.Load() != replicas*rounds {
		t.Errorf("%d times two replicas were inside at once, over %d rounds; want none over %d", overlaps.Load(), total.Load(), replicas*rounds)
	}
}

// TestHolderThatDies: a holder whose refresher stops without Unlock (its
// context ends, or its connection is gone as with a killed process) keeps
// the lock until its lease runs out, and not longer.
func TestHolderThatDies(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = time.Second
	for name, die := range map[string]func(cancel context.CancelFunc, c redis.UniversalClient){
		"context ends":      func(cancel context.CancelFunc, _ redis.UniversalClient) { cancel() },
		"connection closed": func(_ context.CancelFunc, c redis.UniversalClient) { _ = c.Close() },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // mostly waiting for a lease to run out
			p := newPrefix()
			core, logs := observer.New(zap.InfoLevel)
			holderClient := client(t, srv.Addr)
			holder := store(holderClient, p, ttl, zap.New(core))
			other := store(client(t, srv.Addr), p, ttl, nil)
			hctx, hcancel := context.WithCancel(context.Background())
			defer hcancel()
			if err := holder.Lock(hctx, "l"); err != nil {
				t.Fatal(err)
			}
			// Let a refresh happen (the lease's time to live jumps back up),
			// then die.
			key := p + "certmagic/locks/l"
			raw := srv.Client(t)
			last := raw.PTTL(hctx, key).Val()
			eventually.Eventually(t, ttl, "a refresh of the held lock", func() bool {
				d := raw.PTTL(hctx, key).Val()
				refreshed := d > last
				last = d
				return refreshed
			})
			died := time.Now()
			die(hcancel, holderClient)

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := other.Lock(ctx, "l"); err != nil {
				t.Fatalf("Lock after the holder died: %v", err)
			}
			defer other.Unlock(ctx, "l")
			waited := time.Since(died)
			t.Logf("the other replica got the lock %v after the holder died (lease %v)", waited, ttl)
			// The last refresh was at most ttl/3 before dying, so at least
			// 2/3 of a lease was left; and no more than one lease.
			if waited < ttl/2 || waited > ttl+300*time.Millisecond {
				t.Errorf("the other replica got the lock %v after the holder died; want between %v and %v", waited, ttl/2, ttl+300*time.Millisecond)
			}
			if name == "connection closed" {
				waitLog(t, logs, "certmagic lock lost; another replica may hold it now")
			}
		})
	}
}

func waitLog(t *testing.T, logs *observer.ObservedLogs, msg string) {
	t.Helper()
	eventually.Eventually(t, 3*time.Second, "the log line "+msg, func() bool { return logs.FilterMessage(msg).Len() > 0 })
}

// TestRefreshSurvivesRedisRestart is the regression test of the bug several
// public certmagic storages shipped: the refresher gave up on its first
// error, the lease lapsed during a short Redis outage, and a second
// replica took the lock while the first still worked. Here Redis is down
// for more than half a lease; the holder keeps the lock for a lease after,
// and the other replica never gets it.
func TestRefreshSurvivesRedisRestart(t *testing.T) {
	const ttl = 2 * time.Second
	// Longer than a refresh interval (ttl/3) plus an operation timeout, so
	// that at least one refresh fails; shorter than the lease.
	const down = 1200 * time.Millisecond
	for _, tc := range []struct {
		name string
		args []string
	}{
		// With persistence the key comes back with Redis.
		{"persistent", []string{"--appendonly", "yes", "--appendfsync", "always"}},
		// Without, the key is gone; the holder sets it again while its own
		// lease lasts.
		{"not persistent", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each has its own server; mostly sleep
			srv := redistest.Start(t, tc.args...)
			p := newPrefix()
			raw := srv.Client(t)
			core, logs := observer.New(zap.InfoLevel)
			// A short operation timeout, so that a refresh during the outage
			// fails rather than outlasting it in go-redis's dial retries.
			holder := certstore.New(certstore.Options{Client: client(t, srv.Addr), KeyPrefix: p, Logger: zap.New(core),
				LockTTL: ttl, LockPoll: 20 * time.Millisecond, OpTimeout: 300 * time.Millisecond})
			other := store(client(t, srv.Addr), p, ttl, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := holder.Lock(ctx, "l"); err != nil {
				t.Fatal(err)
			}
			key := p + "certmagic/locks/l"
			token := raw.Get(ctx, key).Val()
			// Kill just after a refresh, so that the outage is measured
			// against a whole lease and covers the next refresh.
			eventually.Eventually(t, ttl, "a refresh of the held lock", func() bool {
				return raw.PTTL(ctx, key).Val() >= ttl-100*time.Millisecond
			})
			srv.Kill()
			time.Sleep(down) // models the outage: Redis is away this long
			srv.Restart(t)

			// The holder's token is back in Redis within a refresh interval.
			eventually.Eventually(t, ttl, "the holder restoring its lock after the restart", func() bool {
				return raw.Get(ctx, key).Val() == token
			})
			// For a lease and more, the other replica never gets it: a
			// refresher that had stopped would have let it expire by then.
			eventually.Never(t, ttl+200*time.Millisecond, "the other replica taking the lock after the restart", func() bool {
				ok, err := other.TryLock(ctx, "l")
				if err != nil {
					t.Logf("TryLock: %v", err)
				}
				return ok
			})
			if logs.FilterMessage("certmagic lock lost; another replica may hold it now").Len() != 0 {
				t.Errorf("the holder logged a lost lock: %v", logs.All())
			}
			if l := logs.FilterMessage("refreshing a certmagic lock works again").All(); len(l) > 0 {
				t.Logf("refreshes failed during the outage: %v", l[0].ContextMap()["failed_refreshes"])
			}
			if logs.FilterMessage("refreshing a certmagic lock works again").Len() == 0 {
				t.Errorf("no recovery line (was a refresh tried during the outage?): %v", logs.All())
			}
			restored := logs.FilterMessageSnippet("had vanished from Redis").Len() > 0
			if restored != (tc.args == nil) {
				t.Errorf("key set again = %v, want %v (persistence %v)", restored, tc.args == nil, tc.args != nil)
			}
			if err := holder.Unlock(ctx, "l"); err != nil {
				t.Fatal(err)
			}
			if ok, err := other.TryLock(ctx, "l"); !ok || err != nil {
				t.Errorf("TryLock after Unlock = %v, %v", ok, err)
			}
		})
	}
}

// TestUnlockByNonOwner: Unlock by a replica that does not hold the lock, or
// by a holder whose lease ran out and was taken, leaves the lock alone.
func TestUnlockByNonOwner(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	p := newPrefix()
	const ttl = 600 * time.Millisecond
	a := store(client(t, srv.Addr), p, ttl, nil)
	b := store(client(t, srv.Addr), p, ttl, nil)
	c := store(client(t, srv.Addr), p, ttl, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := p + "certmagic/locks/l"

	if err := a.Lock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	token := raw.Get(ctx, key).Val()
	if err := b.Unlock(ctx, "l"); err != nil {
		t.Errorf("Unlock by a non-owner = %v, want nil", err)
	}
	if got := raw.Get(ctx, key).Val(); got != token {
		t.Errorf("after a non-owner's Unlock the lock holds %q, want the owner's %q", got, token)
	}
	if ok, _ := b.TryLock(ctx, "l"); ok {
		t.Errorf("TryLock succeeded while the owner holds the lock")
	}

	// a's refresher stops (its context ends); its lease runs out; b takes
	// the lock. a's late Unlock must not release b's lock.
	actx, acancel := context.WithCancel(ctx)
	if err := a.Unlock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(actx, "l"); err != nil {
		t.Fatal(err)
	}
	acancel()
	if err := b.Lock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	bToken := raw.Get(ctx, key).Val()
	if err := a.Unlock(ctx, "l"); err != nil {
		t.Errorf("late Unlock = %v", err)
	}
	if got := raw.Get(ctx, key).Val(); got != bToken || got == "" {
		t.Errorf("after the old holder's Unlock the lock holds %q, want the new holder's %q", got, bToken)
	}
	if ok, _ := c.TryLock(ctx, "l"); ok {
		t.Errorf("a third replica took the lock the new holder holds")
	}
	_ = b.Unlock(ctx, "l")
}

// TestRenewLockLease: certmagic's LockLeaseRenewer lengthens the lease of a
// held lock, and the refresher keeps the longer lease; it refuses a lock not
// held, and one another holder has taken.
func TestRenewLockLease(t *testing.T) {
	t.Parallel() // mostly sleep
	srv := redistest.Start(t)
	raw := srv.Client(t)
	p := newPrefix()
	const ttl = 600 * time.Millisecond
	s := store(client(t, srv.Addr), p, ttl, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := p + "certmagic/locks/l"
	if err := s.RenewLockLease(ctx, "l", time.Minute); err == nil {
		t.Errorf("RenewLockLease of a lock not held: no error")
	}
	if err := s.Lock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if err := s.RenewLockLease(ctx, "l", time.Minute); err != nil {
		t.Fatal(err)
	}
	// The refresher runs every ttl/3 (certstore takes no clock): for a
	// lease's time, the key must keep the longer lease.
	eventually.Never(t, ttl, "a refresh shortening the renewed lease", func() bool {
		return raw.PTTL(ctx, key).Val() < 50*time.Second
	})
	if d := raw.PTTL(ctx, key).Val(); d < 50*time.Second {
		t.Errorf("PTTL after renewal and refreshes = %v, want about a minute", d)
	}
	// Another holder's token in the key: the lease is lost, and the
	// refresher does not take the key back.
	raw.Set(ctx, key, "someone-else", time.Minute)
	if err := s.RenewLockLease(ctx, "l", time.Minute); err == nil {
		t.Errorf("RenewLockLease of a lock another holder has: no error")
	}
	raw.Del(ctx, key)
	eventually.Never(t, ttl, "a lost lock set again by its old holder", func() bool {
		return raw.Exists(ctx, key).Val() != 0
	})
	if err := s.Unlock(ctx, "l"); err != nil {
		t.Errorf("Unlock of a lost lock = %v", err)
	}
}

// TestNoValueInLogsOrErrors: a private key stored, loaded, listed and
// locked around never appears in a log line or an error, even when Redis
// echoes a refused command's arguments.
func TestNoValueInLogsOrErrors(t *testing.T) {
	const secret = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIK-secret-key-body\n-----END EC PRIVATE KEY-----\n"
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(core)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	srv := redistest.Start(t)
	s := store(client(t, srv.Addr), newPrefix(), 300*time.Millisecond, log)
	mustStore(t, ctx, s, "certificates/x/x.key", []byte(secret))
	if _, err := s.Load(ctx, "certificates/x/x.key"); err != nil {
		t.Fatal(err)
	}
	_, _ = s.Stat(ctx, "certificates/x/x.key")
	_, _ = s.List(ctx, "certificates", true)
	_ = s.Lock(ctx, "l")
	_ = s.Unlock(ctx, "l")

	// A Redis that refuses HSET echoes its arguments in the error.
	refusing := redistest.Start(t, "--rename-command", "HSET", "")
	r := store(client(t, refusing.Addr), newPrefix(), 300*time.Millisecond, log)
	err := r.Store(ctx, "certificates/x/x.key", []byte(secret))
	if err == nil {
		t.Fatal("Store with HSET disabled: no error")
	}
	if strings.Contains(err.Error(), "MHcCAQEE") {
		t.Errorf("the error holds the value: %v", err)
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, "MHcCAQEE") || strings.Contains(line, "PRIVATE KEY") {
			t.Errorf("a log line holds the value: %s", line)
		}
	}
}

// TestLockWhileRedisIsDown: a waiting Lock rides out Redis errors for one
// lease (a restart or failover), then returns the error instead of
// waiting forever; certmagic retries the order later.
func TestLockWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 400 * time.Millisecond
	s := certstore.New(certstore.Options{Client: client(t, srv.Addr), KeyPrefix: newPrefix(),
		LockTTL: ttl, LockPoll: 20 * time.Millisecond, OpTimeout: 100 * time.Millisecond})
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := s.Lock(ctx, "l")
	took := time.Since(start)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Lock with Redis down = %v (context: %v); want a Redis error before the context ends", err, ctx.Err())
	}
	if took < ttl || took > 5*ttl {
		t.Errorf("Lock gave up after %v; want about one lease (%v)", took, ttl)
	}

	// Down for less than a lease: the waiting Lock gets the lock once
	// Redis is back.
	got := make(chan error, 1)
	go func() { got <- s.Lock(ctx, "l") }()
	time.Sleep(ttl / 4) // models the outage: Redis is away this long
	srv.Restart(t)      // on the test goroutine: Restart may call t.Fatal
	if err := <-got; err != nil {
		t.Errorf("Lock across a short outage: %v", err)
	}
	_ = s.Unlock(ctx, "l")
}
