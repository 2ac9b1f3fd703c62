package tokencache_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/internal/clocktest"
	"github.com/faxgate/faxgate/metrics"
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
	ch := tokencache.WatchKeyFile(ctx, p, time.Second, clock)
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
	for {
		if ok, _ := m.Ready(); ok {
			break
		}
		if wctx.Err() != nil {
			t.Fatal("the rotated key was not tried before the backoff ran out")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err := m.Token(wctx); errors.Is(err, tokencache.ErrUnavailable) {
		t.Fatal("no token after rotation")
	}
}

func newMetrics() *metrics.Metrics { return metrics.New(prometheus.NewRegistry(), "t") }
