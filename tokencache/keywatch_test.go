package tokencache_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/tokencache"
)

func TestWatchKeyFileSignalsContentChanges(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(t0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := tokencache.WatchKeyFile(ctx, p, time.Second, clock, zap.NewNop())
	tick := func() {
		if !clock.WaitPending(1, 5*time.Second) {
			t.Fatal("watcher is not polling")
		}
		clock.Advance(time.Second)
	}
	tick()
	tick() // unchanged: no signal
	select {
	case <-ch:
		t.Fatal("signal without a change")
	default:
	}
	if err := os.WriteFile(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	tick()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal after the key file changed")
	}
}

// panickyClock is a fake clock whose first n NewTimer calls panic: a bug
// injected into a background loop.
type panickyClock struct {
	*clocktest.Fake
	left atomic.Int32
}

func newPanickyClock(n int32) *panickyClock {
	c := &panickyClock{Fake: clocktest.New(t0)}
	c.left.Store(n)
	return c
}

func (c *panickyClock) NewTimer(d time.Duration) clock.Timer {
	if c.left.Add(-1) >= 0 {
		panic("injected clock failure")
	}
	return c.Fake.NewTimer(d)
}

// TestKeyWatcherSurvivesAPanic: a panic in the watcher is logged with its
// stack and the watcher keeps polling, so a later rotation is still seen.
func TestKeyWatcherSurvivesAPanic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := newPanickyClock(1)
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	w := tokencache.NewKeyWatcher(p, time.Second, clock, zap.New(core))
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	tick := func() {
		t.Helper()
		if !clock.WaitPending(1, 5*time.Second) {
			t.Fatal("watcher is not polling")
		}
		clock.Advance(time.Second)
	}
	tick() // the pause after the panic
	if err := os.WriteFile(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	tick()
	select {
	case <-w.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("no signal after the key file changed: the watcher died with the panic")
	}
	got := logs.FilterMessage(background.Msg).All()
	if len(got) != 1 || got[0].ContextMap()["loop"] != "key_watch" || got[0].ContextMap()["stack"] == "" {
		t.Fatalf("panic lines %v, want one for loop key_watch with a stack", got)
	}
}

// rotatingFetcher rejects every key but want, read through key at each call.
type rotatingFetcher struct {
	key   tokencache.KeyFunc
	want  string
	calls int
}

func (r *rotatingFetcher) Fetch(context.Context) (*tokencache.Token, error) {
	r.calls++
	k, err := r.key()
	if err != nil {
		return nil, err
	}
	if k.Reveal() != r.want {
		return nil, tokencache.ErrInvalidKey
	}
	return tokencache.NewToken(tokencache.NewSecret("tok"), t0, 24*time.Hour, false), nil
}

func TestRejectedKeyIsRetriedAtOnceWhenTheFileChanges(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte("old-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(t0)
	changed := make(chan struct{}, 1)
	f := &rotatingFetcher{key: tokencache.FileKey(p), want: "new-key"}
	m := tokencache.NewManager(tokencache.Options{Fetcher: f, Clock: clock, RefreshBefore: time.Hour,
		RetryMin: time.Minute, RetryMax: time.Hour, Metrics: newMetrics(), KeyChanged: changed})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if !clock.WaitPending(1, 5*time.Second) {
		t.Fatal("loop did not back off")
	}
	if ok, why := m.Ready(); ok || why != "upstream rejected the API secret key" {
		t.Fatalf("Ready = %v %q", ok, why)
	}
	if err := os.WriteFile(p, []byte("new-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	changed <- struct{}{} // what WatchKeyFile sends; no clock advance: the retry is immediate
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	eventually.Eventually(t, 5*time.Second, "the rotated key tried before the backoff ran out", func() bool {
		ok, _ := m.Ready()
		return ok
	})
	if _, err := m.Token(wctx); errors.Is(err, tokencache.ErrUnavailable) {
		t.Fatal("no token after rotation")
	}
}

func newMetrics() *tokencache.Metrics { return tokencache.NewMetrics(prometheus.NewRegistry()) }
