package tokencache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/tokencache"
)

// memShared is an in-memory tokencache.Shared with the Redis store's
// semantics, so the fleet protocol can be tested without Redis; the real
// store has its own tests against redis-server.
type memShared struct {
	clock    clock.Clock // nil: the wall clock
	mu       sync.Mutex
	tok      *tokencache.Token
	owner    int64
	leaseEnd time.Time
	nextID   int64
	down     atomic.Bool
	subs     []chan struct{}
	saves    atomic.Int64
}

var errDown = errors.New("store down")

func (s *memShared) now() time.Time {
	if s.clock == nil {
		return time.Now()
	}
	return s.clock.Now()
}

func (s *memShared) Load(context.Context) (*tokencache.Token, error) {
	if s.down.Load() {
		return nil, errDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != nil && s.now().After(s.tok.Expiry) {
		s.tok = nil
	}
	return s.tok, nil
}

func (s *memShared) Save(_ context.Context, t *tokencache.Token) (bool, error) {
	if s.down.Load() {
		return false, errDown
	}
	s.mu.Lock()
	if s.tok != nil && s.tok.Expiry.After(t.Expiry) {
		s.mu.Unlock()
		return false, nil
	}
	s.tok = t
	subs := append([]chan struct{}(nil), s.subs...)
	s.mu.Unlock()
	s.saves.Add(1)
	s.signal(subs)
	return true, nil
}

// notify signals every subscriber without a save, as the Redis store does
// when its subscription comes back after an outage.
func (s *memShared) notify() {
	s.mu.Lock()
	subs := append([]chan struct{}(nil), s.subs...)
	s.mu.Unlock()
	s.signal(subs)
}

func (s *memShared) signal(subs []chan struct{}) {
	for _, c := range subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (s *memShared) DeleteIf(_ context.Context, t *tokencache.Token) (bool, error) {
	if s.down.Load() {
		return false, errDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != nil && s.tok.Value.Equal(t.Value) {
		s.tok = nil
		return true, nil
	}
	return false, nil
}

type memLease struct {
	s  *memShared
	id int64
}

func (s *memShared) Lease(_ context.Context, ttl time.Duration) (tokencache.Lease, bool, error) {
	if s.down.Load() {
		return nil, false, errDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owner != 0 && s.now().Before(s.leaseEnd) {
		return nil, false, nil
	}
	s.nextID++
	s.owner, s.leaseEnd = s.nextID, s.now().Add(ttl)
	return &memLease{s, s.nextID}, true, nil
}

func (l *memLease) Extend(_ context.Context, ttl time.Duration) (bool, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.owner != l.id {
		return false, nil
	}
	l.s.leaseEnd = l.s.now().Add(ttl)
	return true, nil
}

func (l *memLease) Release(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.owner == l.id {
		l.s.owner = 0
	}
	return nil
}

func (s *memShared) Updates(ctx context.Context) <-chan struct{} {
	c := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs = append(s.subs, c)
	s.mu.Unlock()
	return c
}

// countingFetcher issues distinct tokens of a fixed lifetime, issued now on
// clock (nil: the wall clock).
type countingFetcher struct {
	lifetime time.Duration
	calls    atomic.Int64
	delay    time.Duration
	clock    clock.Clock
}

func (f *countingFetcher) Fetch(ctx context.Context) (*tokencache.Token, error) {
	n := f.calls.Add(1)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	now := time.Now()
	if f.clock != nil {
		now = f.clock.Now()
	}
	return tokencache.NewToken(tokencache.NewSecret("fleet-"+string(rune('a'+n-1))), now, f.lifetime, false), nil
}

type replica struct {
	m   *tokencache.Manager
	met *tokencache.Metrics
}

func startReplica(t *testing.T, sh tokencache.Shared, f tokencache.Fetcher, refreshBefore time.Duration) replica {
	t.Helper()
	return startReplicaOn(t, clock.Real{}, nil, sh, f, refreshBefore)
}

// startReplicaOn starts a replica on clock; jitter nil means random.
func startReplicaOn(t *testing.T, clock clock.Clock, jitter func() float64, sh tokencache.Shared, f tokencache.Fetcher, refreshBefore time.Duration) replica {
	t.Helper()
	met := tokencache.NewMetrics(prometheus.NewRegistry())
	m := tokencache.NewManager(tokencache.Options{
		Fetcher: f, Clock: clock, RefreshBefore: refreshBefore, Jitter: jitter,
		RetryMin: 50 * time.Millisecond, RetryMax: time.Second, Metrics: met,
		Shared: sh, LeaseTTL: 600 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return replica{m, met}
}

func tokenOf(t *testing.T, m *tokencache.Manager) *tokencache.Token {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tok, err := m.Token(ctx)
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return tok
}

func TestFleetStartsWithOneTokenCall(t *testing.T) {
	sh, f := &memShared{}, &countingFetcher{lifetime: time.Hour}
	var rs []replica
	for range 5 {
		rs = append(rs, startReplica(t, sh, f, 10*time.Minute))
	}
	want := tokenOf(t, rs[0].m)
	for i, r := range rs {
		if got := tokenOf(t, r.m); !got.Value.Equal(want.Value) {
			t.Fatalf("replica %d holds another token", i)
		}
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("token calls = %d, want 1 for the whole fleet", n)
	}
}

func TestFleetRenewsOncePerLifetime(t *testing.T) {
	// 1.2s tokens renewed in their second half (at 0.6s and 1.2s, without
	// jitter): over 1.5s of fake time exactly two renewals for the fleet.
	clock := clocktest.New(t0)
	sh, f := &memShared{clock: clock}, &countingFetcher{lifetime: 1200 * time.Millisecond, clock: clock}
	noJitter := func() float64 { return 0 }
	var rs []replica
	for range 4 {
		rs = append(rs, startReplicaOn(t, clock, noJitter, sh, f, time.Hour))
	}
	// Each phase: once every replica holds the token issued at the phase's
	// start and sleeps, move the clock to the next renewal (or the end).
	for _, phase := range []struct{ issued, next time.Duration }{
		{0, 600 * time.Millisecond},
		{600 * time.Millisecond, 1200 * time.Millisecond},
		{1200 * time.Millisecond, 1500 * time.Millisecond},
	} {
		eventually.Eventually(t, 5*time.Second, fmt.Sprintf("every replica holds the token issued at %v", phase.issued), func() bool {
			for _, r := range rs {
				if tok := r.m.Current(); tok == nil || !tok.Issued.Equal(t0.Add(phase.issued)) {
					return false
				}
			}
			return true
		})
		if !clock.WaitPending(len(rs), 5*time.Second) {
			t.Fatalf("at %v: %d timers pending, want the %d replicas asleep", phase.issued, clock.Pending(), len(rs))
		}
		clock.Advance(t0.Add(phase.next).Sub(clock.Now()))
	}
	for i, r := range rs {
		if !tokenOf(t, r.m).Valid(clock.Now()) {
			t.Fatalf("replica %d has no valid token", i)
		}
	}
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("token calls = %d over 2.5 half-lifetimes, want 3 (start + one per renewal, not per replica)", n)
	}
	adopted := 0.0
	for _, r := range rs {
		adopted += testutil.ToFloat64(r.met.Adopted.WithLabelValues("redis"))
	}
	if adopted < 3*3 {
		t.Fatalf("tokens adopted from the store = %v, want the 3 other replicas to adopt each of the 3 tokens", adopted)
	}
}

func TestFleet401CausesOneRenewalAndStale401KeepsNewerToken(t *testing.T) {
	sh, f := &memShared{}, &countingFetcher{lifetime: time.Hour}
	a, b := startReplica(t, sh, f, 10*time.Minute), startReplica(t, sh, f, 10*time.Minute)
	old := tokenOf(t, a.m)
	tokenOf(t, b.m)
	var wg sync.WaitGroup
	for _, r := range []replica{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); r.m.Invalidate(old) }()
	}
	wg.Wait()
	na, nb := tokenOf(t, a.m), tokenOf(t, b.m)
	if !na.Value.Equal(nb.Value) || na.Value.Equal(old.Value) {
		t.Fatal("after a fleet-wide 401 the replicas do not share one new token")
	}
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("token calls = %d, want 2 (start + one renewal for both 401s)", n)
	}
	// A late 401 for the old token must not delete the newer shared token.
	if ok, _ := sh.DeleteIf(context.Background(), old); ok {
		t.Fatal("store deleted a newer token for a stale 401")
	}
	c := startReplica(t, sh, f, 10*time.Minute)
	if got := tokenOf(t, c.m); !got.Value.Equal(na.Value) {
		t.Fatal("a new replica did not adopt the shared token")
	}
}

func TestFleetLeaseHolderCrashIsReplaced(t *testing.T) {
	clock := clocktest.New(t0)
	sh, f := &memShared{clock: clock}, &countingFetcher{lifetime: time.Hour, clock: clock}
	// A replica took the lease and died: nobody releases or extends it.
	const deadLease = 400 * time.Millisecond
	if _, ok, _ := sh.Lease(context.Background(), deadLease); !ok {
		t.Fatal("could not take the lease")
	}
	r := startReplicaOn(t, clock, func() float64 { return 0 }, sh, f, 10*time.Minute)
	// The replica polls the busy lease on the clock; while the dead
	// holder's lease runs, it must not call the token endpoint.
	for clock.Now().Before(t0.Add(deadLease)) {
		if !clock.WaitPending(1, 5*time.Second) {
			t.Fatal("the replica is not waiting for the lease")
		}
		if n := f.calls.Load(); n != 0 {
			t.Fatalf("renewed at %v, while the dead holder's lease still ran", clock.Now().Sub(t0))
		}
		next, _ := clock.NextDeadline()
		clock.Advance(next.Sub(clock.Now()))
	}
	tok := tokenOf(t, r.m)
	if tok.Issued.Before(t0.Add(deadLease)) {
		t.Fatalf("token issued at %v, before the dead lease expired at %v", tok.Issued.Sub(t0), deadLease)
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("token calls = %d, want 1", n)
	}
}

func TestFleetStoreOutageRenewsDirectlyAndWritesBack(t *testing.T) {
	clock := clocktest.New(t0)
	sh, f := &memShared{clock: clock}, &countingFetcher{lifetime: time.Hour, clock: clock}
	sh.down.Store(true)
	r := startReplicaOn(t, clock, nil, sh, f, 10*time.Minute)
	tok := tokenOf(t, r.m) // served although the store is down
	if ok, _ := r.m.Ready(); !ok {
		t.Fatal("not ready with a valid token during a store outage")
	}
	if got := testutil.ToFloat64(r.met.StoreErrors.WithLabelValues("load")); got < 1 {
		t.Fatal("faxgate_token_store_errors_total{op=load} not counted")
	}
	if got := testutil.ToFloat64(r.met.Unsynced); got != 1 {
		t.Fatalf("unsynced gauge = %v, want 1", got)
	}
	sh.down.Store(false)
	// The write-back is tried a second after the outage renewal.
	if !clock.WaitPending(1, 5*time.Second) {
		t.Fatal("the loop is not waiting")
	}
	clock.Advance(time.Second)
	eventually.Eventually(t, 5*time.Second, "write-back", func() bool {
		st, _ := sh.Load(context.Background())
		return st != nil && st.Value.Equal(tok.Value)
	})
	eventually.Eventually(t, 5*time.Second, "unsynced gauge back to 0", func() bool { return testutil.ToFloat64(r.met.Unsynced) == 0 })
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("token calls = %d, want 1", n)
	}
}

func TestFleetHotPathDoesNotWaitOnTheStore(t *testing.T) {
	sh := &slowShared{memShared: &memShared{}}
	f := &countingFetcher{lifetime: time.Hour}
	r := startReplica(t, sh, f, 10*time.Minute)
	tokenOf(t, r.m)
	sh.delay.Store(int64(2 * time.Second)) // from now on every Load takes 2s
	// An update notice sends the renewal loop into the slow store.
	newer := tokencache.NewToken(tokencache.NewSecret("newer"), time.Now(), 2*time.Hour, false)
	if _, err := sh.Save(context.Background(), newer); err != nil {
		t.Fatal(err)
	}
	eventually.Eventually(t, 5*time.Second, "the renewal loop inside the slow store", func() bool { return sh.waiting.Load() > 0 })
	start := time.Now()
	for range 1000 {
		tokenOf(t, r.m)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Fatalf("1000 hot-path Token calls took %v while the store answered in 2s", d)
	}
	eventually.Eventually(t, 5*time.Second, "the newer token adopted once the slow store answered", func() bool {
		return tokenOf(t, r.m).Value.Equal(newer.Value)
	})
}

// slowShared answers every Load after delay.
type slowShared struct {
	*memShared
	delay   atomic.Int64
	waiting atomic.Int32 // Loads being delayed now
}

func (s *slowShared) Load(ctx context.Context) (*tokencache.Token, error) {
	d := time.Duration(s.delay.Load())
	if d > 0 {
		s.waiting.Add(1)
		defer s.waiting.Add(-1)
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.memShared.Load(ctx)
}

// panicLeaseShared hands out leases whose Extend panics: a store bug hit by
// the lease keeper while the token call is in flight.
type panicLeaseShared struct{ *memShared }

type panicLease struct{ tokencache.Lease }

func (panicLease) Extend(context.Context, time.Duration) (bool, error) {
	panic("injected lease failure")
}

func (s panicLeaseShared) Lease(ctx context.Context, ttl time.Duration) (tokencache.Lease, bool, error) {
	l, ok, err := s.memShared.Lease(ctx, ttl)
	if l != nil {
		l = panicLease{l}
	}
	return l, ok, err
}

// gatedFetcher blocks every call until gate closes.
type gatedFetcher struct {
	countingFetcher
	gate chan struct{}
}

func (g *gatedFetcher) Fetch(ctx context.Context) (*tokencache.Token, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.countingFetcher.Fetch(ctx)
}

// TestLeaseKeeperPanicIsLoggedAndTheRenewalCompletes: a panic while the
// lease is extended is logged with its stack; the token call in flight
// completes and its token is installed and shared.
func TestLeaseKeeperPanicIsLoggedAndTheRenewalCompletes(t *testing.T) {
	clock := clocktest.New(t0)
	sh := panicLeaseShared{&memShared{clock: clock}}
	f := &gatedFetcher{countingFetcher: countingFetcher{lifetime: time.Hour, clock: clock}, gate: make(chan struct{})}
	core, logs := observer.New(zap.InfoLevel)
	m := tokencache.NewManager(tokencache.Options{
		Fetcher: f, Clock: clock, RefreshBefore: 10 * time.Minute, Jitter: func() float64 { return 0 },
		RetryMin: 50 * time.Millisecond, RetryMax: time.Second, Metrics: tokencache.NewMetrics(prometheus.NewRegistry()),
		Shared: sh, LeaseTTL: 600 * time.Millisecond, Logger: zap.New(core),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// The lease keeper sleeps a third of the lease TTL, then extends: panic.
	if !clock.WaitPending(1, 5*time.Second) {
		t.Fatal("the lease keeper is not running")
	}
	clock.Advance(200 * time.Millisecond)
	eventually.Eventually(t, 5*time.Second, "the panic line", func() bool { return len(logs.FilterMessage(background.Msg).All()) == 1 })
	close(f.gate)
	tok := tokenOf(t, m)
	if st, _ := sh.memShared.Load(ctx); st == nil || !st.Value.Equal(tok.Value) {
		t.Fatal("the token renewed under the broken lease was not shared")
	}
	l := logs.FilterMessage(background.Msg).All()[0].ContextMap()
	if l["loop"] != "token_lease" || !strings.Contains(l["stack"].(string), "panicLease") {
		t.Fatalf("panic line %v", l)
	}
}
