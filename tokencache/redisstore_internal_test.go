package tokencache

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"

	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestUpdatesHealthCheck shortens the idle period so the PING path runs: a
// healthy idle subscription reports nothing, and one whose server stops
// answering (SIGSTOP: the connection stays open) is replaced, then signals
// once it is subscribed again.
func TestUpdatesHealthCheck(t *testing.T) {
	const idle = 150 * time.Millisecond
	srv := redistest.Start(t)
	raw := srv.Client(t)
	var mu sync.Mutex
	var errs []string
	st := NewRedisStore(RedisOptions{
		Client: raw, KeyPrefix: "faxgate:", Key: StaticKey(NewSecret("health-key")), OpTimeout: 300 * time.Millisecond,
		SubscriptionIdle: idle,
		OnError: func(err error) {
			mu.Lock()
			errs = append(errs, OpOf(err)+": "+err.Error())
			mu.Unlock()
		},
	})
	errCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(errs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := st.Updates(ctx)
	defer func() {
		cancel()
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Errorf("Updates channel not closed within 2s of its context ending")
		}
	}()

	// Idle for several PING rounds: PONGs are understood, nothing is an
	// error and nothing is signalled.
	eventually.Never(t, 6*idle, "an error or a signal from a healthy idle subscription", func() bool {
		select {
		case <-ch:
			return true
		default:
			return errCount() != 0
		}
	})

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually.Eventually(t, 3*time.Second, "the stopped server reported", func() bool { return errCount() != 0 })
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := strings.Join(errs, "\n")
	mu.Unlock()
	if !strings.Contains(got, "subscribe: token store subscribe: no answer to PING") {
		t.Fatalf("errors while the server was stopped = %q; want the unanswered PING", got)
	}
	select {
	case <-ch:
	case <-time.After(3 * time.Second):
		t.Fatalf("no signal within 3s of the server answering again")
	}
}
