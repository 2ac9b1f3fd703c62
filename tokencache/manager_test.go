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

	"github.com/faxgate/faxgate/internal/testing/eventually"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/tokencache"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeFetcher issues numbered tokens, or the error queued for the next call.
type fakeFetcher struct {
	clock    *clocktest.Fake
	lifetime time.Duration
	calls    atomic.Int64
	mu       sync.Mutex
	errs     []error       // consumed one per call; nil entries mean success
	failAll  error         // when set, every call fails with it
	gate     chan struct{} // when set, calls block until it is closed
}

func (f *fakeFetcher) Fetch(ctx context.Context) (*tokencache.Token, error) {
	n := f.calls.Add(1)
	f.mu.Lock()
	gate := f.gate
	var err error
	if f.failAll != nil {
		err = f.failAll
	} else if len(f.errs) > 0 {
		err, f.errs = f.errs[0], f.errs[1:]
	}
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return tokencache.NewToken(tokencache.NewSecret("tok-"+string(rune('a'+n-1))), f.clock.Now(), f.lifetime, false), nil
}

func (f *fakeFetcher) setFailAll(err error) {
	f.mu.Lock()
	f.failAll = err
	f.mu.Unlock()
}

type fixture struct {
	clock *clocktest.Fake
	fetch *fakeFetcher
	m     *tokencache.Manager
	met   *tokencache.Metrics
}

func newFixture(t *testing.T, jitter float64, gate chan struct{}, setup ...func(*fakeFetcher)) *fixture {
	t.Helper()
	clock := clocktest.New(t0)
	f := &fakeFetcher{clock: clock, lifetime: 24 * time.Hour, gate: gate}
	for _, s := range setup {
		s(f)
	}
	met := tokencache.NewMetrics(prometheus.NewRegistry())
	m := tokencache.NewManager(tokencache.Options{
		Fetcher: f, Clock: clock, RefreshBefore: time.Hour,
		RetryMin: time.Second, RetryMax: time.Minute, Metrics: met,
		Jitter: func() float64 { return jitter },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &fixture{clock: clock, fetch: f, m: m, met: met}
}

func (fx *fixture) token(t *testing.T) *tokencache.Token {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tok, err := fx.m.Token(ctx)
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return tok
}

// sleeping waits until the renewal loop has armed its timer, and returns when it fires.
func (fx *fixture) sleeping(t *testing.T) time.Time {
	t.Helper()
	if !fx.clock.WaitPending(1, 5*time.Second) {
		t.Fatal("renewal loop never went to sleep")
	}
	at, _ := fx.clock.NextDeadline()
	return at
}

func TestFirstTokenBeforeReady(t *testing.T) {
	fx := newFixture(t, 0, nil)
	tok := fx.token(t)
	if got := tok.Value.Reveal(); got != "tok-a" {
		t.Fatalf("token = %q, want tok-a", got)
	}
	if ok, why := fx.m.Ready(); !ok {
		t.Fatalf("Ready = false (%s) with a valid token", why)
	}
	if got := testutil.ToFloat64(fx.met.Refresh.WithLabelValues("ok")); got != 1 {
		t.Fatalf("refresh ok = %v, want 1", got)
	}
	if got, want := testutil.ToFloat64(fx.met.Expiry), float64(t0.Add(24*time.Hour).Unix()); got != want {
		t.Fatalf("expiry gauge = %v, want %v", got, want)
	}
}

func TestNotReadyBeforeFirstToken(t *testing.T) {
	gate := make(chan struct{})
	fx := newFixture(t, 0, gate)
	if ok, why := fx.m.Ready(); ok || why != "no valid token yet" {
		t.Fatalf("Ready = %v, %q before the first token", ok, why)
	}
	close(gate)
	fx.token(t)
}

func TestConcurrentRequestsCauseOneFetch(t *testing.T) {
	gate := make(chan struct{})
	fx := newFixture(t, 0, gate)
	var wg sync.WaitGroup
	got := make(chan string, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got <- fx.token(t).Value.Reveal()
		}()
	}
	// The one fetch is under way; waiters pile up behind it until the gate
	// opens (any that come later find its token).
	eventually.Eventually(t, 5*time.Second, "the fetch under way", func() bool { return fx.fetch.calls.Load() >= 1 })
	close(gate)
	wg.Wait()
	close(got)
	for v := range got {
		if v != "tok-a" {
			t.Fatalf("a waiter got %q, want tok-a", v)
		}
	}
	if n := fx.fetch.calls.Load(); n != 1 {
		t.Fatalf("fetches = %d, want 1", n)
	}
}

func TestRenewsRefreshBeforeExpiry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter float64
		want   time.Duration // after issue
	}{
		{"no jitter", 0, 23 * time.Hour},
		{"full jitter", 0.999999, 23*time.Hour - 15*time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, tc.jitter, nil)
			fx.token(t)
			at := fx.sleeping(t)
			if d := at.Sub(t0); d < tc.want-time.Second || d > tc.want+time.Second {
				t.Fatalf("renewal scheduled %v after issue, want %v", d, tc.want)
			}
			fx.clock.Advance(at.Sub(t0) - time.Second)
			if n := fx.fetch.calls.Load(); n != 1 {
				t.Fatalf("fetched %d times before the renewal time, want 1", n)
			}
			fx.clock.Advance(time.Second)
			fx.sleeping(t)
			if n := fx.fetch.calls.Load(); n != 2 {
				t.Fatalf("fetches = %d after the renewal time, want 2", n)
			}
			if got := fx.token(t).Value.Reveal(); got != "tok-b" {
				t.Fatalf("token after renewal = %q, want tok-b", got)
			}
		})
	}
}

func TestShortLifetimeRenewsHalfway(t *testing.T) {
	// 10m is shorter than 2 x refresh_before (1h).
	fx := newFixture(t, 0, nil, func(f *fakeFetcher) { f.lifetime = 10 * time.Minute })
	fx.token(t)
	if at := fx.sleeping(t); at.Sub(t0) != 5*time.Minute {
		t.Fatalf("renewal at %v after issue, want 5m", at.Sub(t0))
	}
}

func TestBackoffDoublesUpToRetryMax(t *testing.T) {
	// jitter 0: each wait is half the nominal backoff
	fx := newFixture(t, 0, nil, func(f *fakeFetcher) { f.failAll = errors.New("boom") })
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		at := fx.sleeping(t)
		if d := at.Sub(fx.clock.Now()); d != w {
			t.Fatalf("wait %d = %v, want %v", i, d, w)
		}
		fx.clock.Advance(w)
	}
	if got := testutil.ToFloat64(fx.met.Refresh.WithLabelValues("error")); got < float64(len(want)) {
		t.Fatalf("refresh errors = %v, want >= %d", got, len(want))
	}
}

func TestKeepsTokenWhileRenewalFailsButNeverPastExpiry(t *testing.T) {
	fx := newFixture(t, 0, nil)
	fx.token(t)
	fx.sleeping(t)
	fx.fetch.setFailAll(errors.New("token endpoint down"))
	fx.clock.Advance(23 * time.Hour) // renewal due: it fails
	fx.sleeping(t)
	if got := fx.token(t).Value.Reveal(); got != "tok-a" {
		t.Fatalf("token while renewal fails = %q, want the current tok-a", got)
	}
	if ok, _ := fx.m.Ready(); !ok {
		t.Fatal("not ready while a valid token is held")
	}
	// Walk up to expiry in backoff steps; the token stays in use until the margin.
	for fx.clock.Now().Before(t0.Add(24*time.Hour - 10*time.Second)) {
		at := fx.sleeping(t)
		fx.clock.Advance(min(at.Sub(fx.clock.Now()), t0.Add(24*time.Hour-10*time.Second).Sub(fx.clock.Now())))
	}
	if got := fx.token(t).Value.Reveal(); got != "tok-a" {
		t.Fatalf("token 10s before expiry = %q, want tok-a", got)
	}
	fx.clock.Advance(6 * time.Second) // inside the expiry margin
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := fx.m.Token(ctx); !errors.Is(err, tokencache.ErrUnavailable) {
		t.Fatalf("Token past expiry: err = %v, want ErrUnavailable", err)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("Token past expiry took %v; it must fail fast while renewal is in backoff", time.Since(start))
	}
	if ok, why := fx.m.Ready(); ok || why != "token renewal failing" {
		t.Fatalf("Ready = %v, %q after expiry", ok, why)
	}
}

func TestInvalidKeyShowsInReadinessAndMetrics(t *testing.T) {
	fx := newFixture(t, 0, nil, func(f *fakeFetcher) { f.failAll = tokencache.ErrInvalidKey })
	fx.sleeping(t)
	if ok, why := fx.m.Ready(); ok || why != "upstream rejected the API secret key" {
		t.Fatalf("Ready = %v, %q", ok, why)
	}
	if got := testutil.ToFloat64(fx.met.Refresh.WithLabelValues("invalid_key")); got != 1 {
		t.Fatalf("invalid_key = %v, want 1", got)
	}
	fx.fetch.setFailAll(nil) // the operator fixed the key file
	fx.clock.Advance(time.Second)
	fx.sleeping(t) // the retry ran and the loop sleeps until the next renewal
	fx.token(t)
	if ok, _ := fx.m.Ready(); !ok {
		t.Fatal("not ready after the key was fixed")
	}
}

func TestInvalidateRenewsOnceAndNotInALoop(t *testing.T) {
	fx := newFixture(t, 0, nil)
	a := fx.token(t)
	if !fx.m.Invalidate(a) {
		t.Fatal("Invalidate(current) = false, want a resend")
	}
	b := fx.token(t)
	if b.Value.Reveal() != "tok-b" || !b.By401 {
		t.Fatalf("after 401: token %q by401=%v, want tok-b by401", b.Value.Reveal(), b.By401)
	}
	// A late 401 for the old token must not discard the new one.
	if !fx.m.Invalidate(a) {
		t.Fatal("stale Invalidate = false, want resend with the newer token")
	}
	if got := fx.token(t); got != b {
		t.Fatalf("stale 401 replaced the token with %q", got.Value.Reveal())
	}
	// The new token, itself obtained because of a 401, is rejected at once: relay, no renewal.
	if fx.m.Invalidate(b) {
		t.Fatal("Invalidate(young by-401 token) = true, want the 401 relayed")
	}
	fx.sleeping(t)
	if n := fx.fetch.calls.Load(); n != 2 {
		t.Fatalf("fetches = %d, want 2", n)
	}
	fx.clock.Advance(30 * time.Second) // older than min(30s, lifetime/10)
	if !fx.m.Invalidate(b) {
		t.Fatal("Invalidate(30s-old by-401 token) = false, want renewal")
	}
	if got := fx.token(t).Value.Reveal(); got != "tok-c" {
		t.Fatalf("token = %q, want tok-c", got)
	}
}

func TestTokenWaitHonoursContext(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	fx := newFixture(t, 0, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := fx.m.Token(ctx); !errors.Is(err, tokencache.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable when the context ends first", err)
	}
}

type panicFetcher struct{ calls atomic.Int64 }

func (p *panicFetcher) Fetch(context.Context) (*tokencache.Token, error) {
	p.calls.Add(1)
	panic("fetcher bug")
}

func TestFetcherPanicDoesNotKillTheLoop(t *testing.T) {
	clock := clocktest.New(t0)
	pf := &panicFetcher{}
	m := tokencache.NewManager(tokencache.Options{Fetcher: pf, Clock: clock, RefreshBefore: time.Hour,
		RetryMin: time.Second, RetryMax: time.Minute, Metrics: tokencache.NewMetrics(prometheus.NewRegistry()),
		Jitter: func() float64 { return 0 }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if !clock.WaitPending(1, 5*time.Second) {
		t.Fatal("loop did not survive the panic")
	}
	clock.Advance(time.Second)
	if !clock.WaitPending(1, 5*time.Second) || pf.calls.Load() != 2 {
		t.Fatalf("calls = %d, want 2 (loop retried after the panic)", pf.calls.Load())
	}
}

// TestFetcherPanicIsLogged: the recovered fetcher panic leaves a log line
// with the stack, and not the panic's text (it could hold a secret).
func TestFetcherPanicIsLogged(t *testing.T) {
	clock := clocktest.New(t0)
	core, logs := observer.New(zap.InfoLevel)
	m := tokencache.NewManager(tokencache.Options{Fetcher: &panicFetcher{}, Clock: clock, RefreshBefore: time.Hour,
		RetryMin: time.Second, RetryMax: time.Minute, Metrics: tokencache.NewMetrics(prometheus.NewRegistry()),
		Jitter: func() float64 { return 0 }, Logger: zap.New(core)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if !clock.WaitPending(1, 5*time.Second) {
		t.Fatal("loop did not survive the panic")
	}
	got := logs.FilterMessage(background.Msg).All()
	if len(got) != 1 {
		t.Fatalf("%d panic lines, want 1", len(got))
	}
	f := got[0].ContextMap()
	if f["loop"] != "token_renewal" || !strings.Contains(f["stack"].(string), "panicFetcher") || f["panic"] != "value of type string" {
		t.Errorf("panic line %v", f)
	}
}

// TestRenewalLoopSurvivesAPanic: a panic in the loop itself (here the
// clock's NewTimer, once) is logged, counted as a failed attempt, and the
// loop goes on renewing: the token is renewed after the backoff and the
// next renewal is scheduled.
func TestRenewalLoopSurvivesAPanic(t *testing.T) {
	clock := newPanickyClock(1)
	ff := &fakeFetcher{clock: clock.Fake, lifetime: 24 * time.Hour}
	core, logs := observer.New(zap.InfoLevel)
	m := tokencache.NewManager(tokencache.Options{Fetcher: ff, Clock: clock, RefreshBefore: time.Hour,
		RetryMin: 2 * time.Second, RetryMax: time.Minute, Metrics: tokencache.NewMetrics(prometheus.NewRegistry()),
		Jitter: func() float64 { return 0 }, Logger: zap.New(core)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// First token at once; then the wait for its renewal panics, and the
	// loop sleeps out the backoff of one failure (retry_min/2 with no jitter).
	if !clock.WaitPending(1, 5*time.Second) {
		t.Fatal("loop died with the panic")
	}
	if got := logs.FilterMessage(background.Msg).All(); len(got) != 1 || got[0].ContextMap()["loop"] != "token_renewal" {
		t.Fatalf("panic lines %v, want one for loop token_renewal", got)
	}
	if ok, why := m.Ready(); !ok {
		t.Fatalf("not ready after a panic with a valid token held: %s", why)
	}
	if at, _ := clock.NextDeadline(); !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("restart at %v, want after the backoff at %v", at, t0.Add(time.Second))
	}
	clock.Advance(time.Second)
	// The restarted loop renews (the panicked attempt counts as failed) and
	// then schedules the next renewal an hour before expiry.
	want := t0.Add(time.Second + 23*time.Hour)
	eventually.Eventually(t, 5*time.Second, fmt.Sprintf("the next wake at the renewal, %v", want), func() bool {
		at, ok := clock.NextDeadline()
		return ok && at.Equal(want)
	})
	if n := ff.calls.Load(); n != 2 {
		t.Fatalf("fetches = %d, want 2", n)
	}
}

// expiredFetcher issues tokens that are already past their expiry margin.
type expiredFetcher struct {
	clock *clocktest.Fake
	calls atomic.Int64
}

func (e *expiredFetcher) Fetch(context.Context) (*tokencache.Token, error) {
	e.calls.Add(1)
	return tokencache.NewToken(tokencache.NewSecret("short"), e.clock.Now().Add(-2*time.Second), time.Second, false), nil
}

// Regression: an already-expired token was installed as a success, and the
// loop renewed again at once, hundreds of thousands of times a second.
func TestAlreadyExpiredTokenBacksOffInsteadOfSpinning(t *testing.T) {
	clock := clocktest.New(t0)
	f := &expiredFetcher{clock: clock}
	met := tokencache.NewMetrics(prometheus.NewRegistry())
	m := tokencache.NewManager(tokencache.Options{Fetcher: f, Clock: clock, RefreshBefore: time.Hour,
		RetryMin: time.Second, RetryMax: time.Minute, Metrics: met, Jitter: func() float64 { return 0 }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if !clock.WaitPending(1, 5*time.Second) {
		t.Fatal("the loop never backed off")
	}
	// A spinning loop would make thousands of calls meanwhile.
	eventually.Never(t, 50*time.Millisecond, "a second token call without the clock moving", func() bool { return f.calls.Load() != 1 })
	if got := testutil.ToFloat64(met.Refresh.WithLabelValues("error")); got != 1 {
		t.Fatalf("refresh errors = %v, want 1", got)
	}
}
