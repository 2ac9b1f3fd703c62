package tokencache

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/tracing"
)

// Source is what the request path needs from the token machinery.
type Source interface {
	// Token returns a token valid now. With a valid cached token it returns
	// at once, without locks or I/O (the hot path); otherwise it waits for
	// the renewal in flight, or fails fast with ErrUnavailable.
	Token(ctx context.Context) (*Token, error)
	// Invalidate reports that the upstream rejected t with 401. It returns
	// whether resending the request with a fresh token is worthwhile.
	Invalidate(t *Token) bool
	// Current returns the token held now, valid or not, or nil; it never
	// waits and never triggers a renewal.
	Current() *Token
}

// Options configures a Manager.
type Options struct {
	Fetcher       Fetcher
	Clock         clock.Clock
	RefreshBefore time.Duration // renew when less than this lifetime remains
	RetryMin      time.Duration // backoff bounds of a failing renewal
	RetryMax      time.Duration
	Metrics       *Metrics
	Logger        *zap.Logger
	// Panics counts the panics recovered in its background loops
	// (faxgate_background_panics_total); nil counts nothing.
	Panics background.Counter
	// Jitter returns a number in [0,1); nil means math/rand/v2. Tests pin it.
	Jitter func() float64
	// Shared, when set, shares the token with other replicas (token.store: redis).
	Shared Shared
	// LeaseTTL bounds how long a crashed renewer blocks the fleet; the lease
	// is extended while the token call is in flight. Default 10s.
	LeaseTTL time.Duration
	// KeyChanged signals that the API secret changed on disk: a replica whose
	// key was rejected retries at once instead of waiting out its backoff.
	KeyChanged <-chan struct{}
	// Tracer, when set, records every renewal as a trace of its own
	// ("token.renew", with the shared store's calls and the token call as
	// children) and a request's wait for a token as a span "token.wait"
	// (docs/tracing.md); nil when tracing is off.
	Tracer trace.Tracer
}

// Manager keeps one valid token in memory and renews it ahead of expiry from
// a single background loop, so concurrent requests never cause two calls to
// the token endpoint.
type Manager struct {
	opts Options
	log  *zap.Logger

	cur  atomic.Pointer[Token] // read lock-free by the hot path
	kick chan struct{}         // wakes the loop; buffered 1

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every state change
	fetching   bool          // an attempt is in flight
	failing    bool          // the last attempt failed; callers without a valid token fail fast
	invalidKey bool          // the last attempt was refused with 401
	pending401 bool          // the current token was invalidated by a 401
	rejected   *Token        // the token the upstream answered 401 to
	renewAt    time.Time
	unsynced   *Token // renewed during a shared-store outage, to be written back
	fleet      fleetState
	// For Status: the last renewal attempt (when it ended and how) and
	// where the current token came from.
	lastRenewal time.Time
	lastResult  string
	source      string
}

var _ Source = (*Manager)(nil)

// NewManager builds a Manager; call Run to start renewing.
func NewManager(o Options) *Manager {
	if o.Jitter == nil {
		o.Jitter = rand.Float64
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.Tracer != nil && o.Shared != nil {
		o.Shared = tracedShared{o.Shared, o.Tracer}
	}
	return &Manager{
		opts:    o,
		log:     o.Logger,
		kick:    make(chan struct{}, 1),
		changed: make(chan struct{}),
	}
}

// Token implements Source.
func (m *Manager) Token(ctx context.Context) (*Token, error) {
	if t := m.cur.Load(); t.Valid(m.opts.Clock.Now()) {
		return t, nil
	}
	return m.wait(ctx)
}

func (m *Manager) wait(ctx context.Context) (tok *Token, err error) {
	ctx, span := tracing.Child(ctx, m.opts.Tracer, "token.wait")
	if span.IsRecording() {
		defer func() { endSpan(span, err, resultOf(err)) }()
	}
	for {
		m.mu.Lock()
		t := m.cur.Load()
		if t.Valid(m.opts.Clock.Now()) {
			m.mu.Unlock()
			return t, nil
		}
		if m.failing && !m.fetching {
			// In backoff: answer at once rather than hold callers for minutes.
			m.mu.Unlock()
			return nil, ErrUnavailable
		}
		ch := m.changed
		m.mu.Unlock()
		m.wake()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ErrUnavailable
		}
	}
}

// Current implements Source.
func (m *Manager) Current() *Token { return m.cur.Load() }

// Invalidate implements Source.
func (m *Manager) Invalidate(t *Token) bool {
	now := m.opts.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.cur.Load()
	if cur != t {
		// Already replaced (or being replaced): a late 401 must not discard a newer token.
		return cur.Valid(now) || m.pending401 || m.fetching
	}
	if t.By401 && now.Sub(t.Issued) < min(30*time.Second, t.Lifetime()/10) {
		// A token just obtained because of a 401 was rejected again: relay the 401
		// instead of renewing in a loop.
		return false
	}
	m.cur.Store(nil)
	m.pending401 = true
	m.rejected = t
	m.opts.Metrics.Expiry.Set(0)
	m.wake()
	return true
}

// Ready reports whether a valid token is held and, if not, why.
func (m *Manager) Ready() (bool, string) {
	if m.cur.Load().Valid(m.opts.Clock.Now()) {
		return true, ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.invalidKey:
		return false, "upstream rejected the API secret key"
	case m.failing:
		return false, "token renewal failing"
	default:
		return false, "no valid token yet"
	}
}

func (m *Manager) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// broadcast wakes every waiter; m.mu must be held.
func (m *Manager) broadcast() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Run renews the token until ctx is done. It obtains the first token at once.
//
// A panic in the loop (a bug in a Shared store, the clock or the fetcher) is
// logged with its stack and counted as a failed attempt: waiters are released
// with ErrUnavailable and the loop retries after the usual backoff, so the
// process neither dies nor keeps a dead renewal loop behind a token that
// will expire.
func (m *Manager) Run(ctx context.Context) {
	st := &loopState{}
	if m.opts.Shared != nil {
		st.updates = m.opts.Shared.Updates(ctx)
		m.fleet.updates = st.updates
	}
	background.Loop(ctx, m.log, m.opts.Panics, "token_renewal", func(ctx context.Context) bool {
		return m.afterPanic(ctx, st)
	}, func(ctx context.Context) {
		for !m.step(ctx, st) {
		}
	})
}

// loopState is the renewal loop's own bookkeeping; only Run's goroutine
// touches it, and it outlives a panic in one step.
type loopState struct {
	updates     <-chan struct{}
	failures    int
	lastFailure time.Time
}

// afterPanic turns a panicked step into a failed attempt, then waits out
// its backoff; it reports false when ctx ended meanwhile.
func (m *Manager) afterPanic(ctx context.Context, st *loopState) bool {
	st.failures++
	st.lastFailure = m.opts.Clock.Now()
	m.mu.Lock()
	m.fetching = false
	m.failing = true
	m.lastRenewal, m.lastResult = st.lastFailure, "error"
	m.broadcast()
	m.mu.Unlock()
	return clock.Sleep(ctx, m.opts.Clock, m.backoffLocked(st.failures))
}

// step is one turn of the loop: wait until something is due, then write
// back or renew. It reports true when ctx ended.
func (m *Manager) step(ctx context.Context, st *loopState) (stop bool) {
	now := m.opts.Clock.Now()
	next := m.nextWake(now, st)
	if d := next.Sub(now); d > 0 {
		timer := m.opts.Clock.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return true
		case <-m.kick:
			timer.Stop()
			return false
		case <-m.opts.KeyChanged:
			timer.Stop()
			if m.keyRejected() {
				m.log.Info("api key changed on disk; retrying the rejected renewal now")
				st.failures = 0
			}
			return false
		case _, ok := <-st.updates:
			timer.Stop()
			if !ok {
				st.updates, m.fleet.updates = nil, nil
			} else if m.adoptShared(ctx) {
				st.failures = 0
			}
			return false
		case <-timer.C():
		}
	}
	if ctx.Err() != nil {
		return true
	}
	if m.syncDue() {
		m.writeBack(ctx)
		if !m.renewalDue(st.failures, st.lastFailure) {
			return false
		}
	}
	if err := m.renew(ctx); err != nil {
		st.failures++
		st.lastFailure = m.opts.Clock.Now()
		return false
	}
	st.failures = 0
	return false
}

// nextWake is when the loop has something to do. The lock is released by a
// defer so that a panic here (a broken Jitter) cannot leave m.mu held.
func (m *Manager) nextWake(now time.Time, st *loopState) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	t := m.cur.Load()
	switch {
	case st.failures > 0:
		next = st.lastFailure.Add(m.backoff(st.failures))
	case !t.Valid(now):
		next = now
	default:
		next = m.renewAt
	}
	if m.unsynced != nil {
		// Write back the token renewed during an outage as soon as the store answers.
		next = minTime(next, m.fleet.syncAt)
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (m *Manager) keyRejected() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.invalidKey
}

// renewalDue reports whether the loop woke for a renewal (not only a write-back).
func (m *Manager) renewalDue(failures int, lastFailure time.Time) bool {
	now := m.opts.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if failures > 0 {
		return !now.Before(lastFailure.Add(m.backoff(failures)))
	}
	t := m.cur.Load()
	return !t.Valid(now) || !now.Before(m.renewAt)
}

// renew makes one attempt at obtaining a new token: from the shared store
// when another replica already renewed, else from the token endpoint.
func (m *Manager) renew(ctx context.Context) (err error) {
	if m.opts.Tracer != nil {
		var span trace.Span
		ctx, span = m.opts.Tracer.Start(ctx, RenewSpan, trace.WithNewRoot())
		defer func() { endSpan(span, err, resultOf(err)) }()
	}
	m.mu.Lock()
	m.fetching = true
	by401, rejected := m.pending401, m.rejected
	m.broadcast()
	m.mu.Unlock()

	var tok *Token
	var source string
	if m.opts.Shared != nil {
		tok, source, err = m.renewShared(ctx, rejected)
	} else {
		tok, err = m.fetch(ctx)
		source = "upstream"
		if err == nil {
			tok.By401 = by401
		}
	}

	if err == nil && !tok.Valid(m.opts.Clock.Now()) {
		// A token that is already unusable (an expires_in shorter than the
		// round trip) is a failure: installing it would renew again at once,
		// in a loop that sends the key upstream as fast as it can.
		err = errors.New("the token endpoint issued a token that expired before it could be used")
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	m.fetching = false
	defer m.broadcast()
	m.lastRenewal = m.opts.Clock.Now()
	if err != nil {
		m.invalidKey = errors.Is(err, ErrInvalidKey)
		m.failing = true
		result := "error"
		if m.invalidKey {
			result = "invalid_key"
			m.log.Error("upstream rejected the API secret key; check upstream.api_key_file or api_key_env")
		} else {
			m.log.Warn("token renewal failed", zap.Error(err))
		}
		m.lastResult = result
		m.opts.Metrics.Refresh.WithLabelValues(result).Inc()
		return err
	}
	m.lastResult = "ok"
	if source == "upstream" {
		m.opts.Metrics.Refresh.WithLabelValues("ok").Inc()
	}
	m.install(tok, source)
	return nil
}

// install makes tok the current token; m.mu must be held.
func (m *Manager) install(tok *Token, source string) {
	if m.unsynced != nil && m.unsynced != tok {
		m.unsynced = nil // superseded: the store holds a newer token or will get this one
		m.opts.Metrics.Unsynced.Set(0)
	}
	m.cur.Store(tok)
	m.source = source
	m.pending401, m.rejected, m.failing, m.invalidKey = false, nil, false, false
	m.renewAt = m.scheduleRenewal(tok)
	m.opts.Metrics.Adopted.WithLabelValues(source).Inc()
	m.opts.Metrics.Expiry.Set(float64(tok.Expiry.UnixNano()) / 1e9)
	m.log.Info("token in use", zap.String("source", source), zap.Time("expires", tok.Expiry),
		zap.Time("next_renewal", m.renewAt), zap.Bool("after_401", tok.By401))
}

// fetch calls the Fetcher. A panic in it must not kill the renewal loop: it
// is logged with its stack and becomes a failed attempt like any other.
func (m *Manager) fetch(ctx context.Context) (tok *Token, err error) {
	panicked := false
	defer func() {
		if panicked {
			tok, err = nil, errors.New("token fetch panicked")
		}
	}()
	defer background.Guard(m.log, m.opts.Panics, "token_renewal", "counted as a failed renewal", &panicked)
	ctx, span := tracing.Child(ctx, m.opts.Tracer, "token.fetch", trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		defer func() { endSpan(span, err, resultOf(err)) }()
	}
	return m.opts.Fetcher.Fetch(ctx)
}

// scheduleRenewal picks when to renew tok: when less than refresh_before of
// its lifetime remains, moved earlier by up to a quarter of that window at
// random so replicas do not renew in lockstep. Tokens shorter than twice
// refresh_before are renewed in their second half instead.
func (m *Manager) scheduleRenewal(tok *Token) time.Time {
	before := min(m.opts.RefreshBefore, tok.Lifetime()/2)
	jitter := time.Duration(m.opts.Jitter() * float64(before/4))
	return tok.Expiry.Add(-before - jitter)
}

// backoffLocked is backoff for callers that do not hold m.mu.
func (m *Manager) backoffLocked(failures int) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.backoff(failures)
}

// backoff is retry_min doubled per consecutive failure up to retry_max, with
// "equal jitter": between half and all of that.
func (m *Manager) backoff(failures int) time.Duration {
	d := m.opts.RetryMin
	for i := 1; i < failures && d < m.opts.RetryMax; i++ {
		d *= 2
	}
	d = min(d, m.opts.RetryMax)
	return d/2 + time.Duration(m.opts.Jitter()*float64(d/2))
}
