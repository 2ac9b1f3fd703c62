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

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/tokencache"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// rsUpdates subscribes st and waits until Redis has the subscription, so a
// test's next Save is not published into the void.
func rsUpdates(t *testing.T, raw *redis.Client, st *tokencache.RedisStore, wantPatterns int64) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := st.Updates(ctx)
	t.Cleanup(func() {
		cancel()
		// The channel is closed once ctx ends: no goroutine outlives the test.
		if !rsClosed(ch, 2*time.Second) {
			t.Errorf("Updates channel not closed within 2s of its context ending")
		}
	})
	eventually.EventuallyErr(t, 3*time.Second, "Updates subscribed", func() error {
		n, err := raw.PubSubNumPat(context.Background()).Result()
		if err == nil && n < wantPatterns {
			err = fmt.Errorf("NUMPAT = %d, want %d", n, wantPatterns)
		}
		return err
	})
	return ch
}

// rsSignalled reports whether ch signals within d.
func rsSignalled(ch <-chan struct{}, d time.Duration) bool {
	return eventually.Wait(d, func() error {
		select {
		case _, ok := <-ch:
			if ok {
				return nil
			}
		default:
		}
		return errNoSignal
	}) == nil
}

// rsClosed reports whether ch is closed within d (signals before it are
// drained).
func rsClosed(ch <-chan struct{}, d time.Duration) bool {
	return eventually.Wait(d, func() error {
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return nil
				}
			default:
				return errNoSignal
			}
		}
	}) == nil
}

var errNoSignal = errors.New("nothing on the channel")

func TestRedisStoreUpdates(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	key := newRSKey(secret)
	sub := rsStore(raw, key.fn())
	ch := rsUpdates(t, raw, sub, 1)
	if rsSignalled(ch, 100*time.Millisecond) {
		t.Fatalf("signal before anything was saved")
	}

	other := rsStore(raw, newRSKey(secret).fn())
	if ok, err := other.Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save = %v, %v", ok, err)
	}
	if !rsSignalled(ch, 2*time.Second) {
		t.Fatalf("no signal within 2s of another replica's Save")
	}

	// Another account under the same prefix is no news for this one.
	otherAccount := rsStore(raw, newRSKey(rsRandom(t, "otherkey")).fn())
	if ok, err := otherAccount.Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save(other account) = %v, %v", ok, err)
	}
	if rsSignalled(ch, 300*time.Millisecond) {
		t.Errorf("signal for another account's token")
	}

	// After a key rotation the subscription follows the new secret.
	newSecret := rsRandom(t, "rotated")
	key.set(newSecret)
	if ok, err := rsStore(raw, newRSKey(newSecret).fn()).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save(rotated) = %v, %v", ok, err)
	}
	if !rsSignalled(ch, 2*time.Second) {
		t.Errorf("no signal for the rotated key's token")
	}
}

func TestRedisStoreUpdatesPrefixIsLiteral(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	withPrefix := func(p string) func(*tokencache.RedisOptions) {
		return func(o *tokencache.RedisOptions) { o.KeyPrefix = p }
	}
	sub := rsStore(raw, newRSKey(secret).fn(), withPrefix("fax*[g]:"))
	ch := rsUpdates(t, raw, sub, 1)

	// "fax*[g]:" as a glob would match "faxXYg:"; as a prefix it must not.
	if ok, err := rsStore(raw, newRSKey(secret).fn(), withPrefix("faxXYg:")).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save = %v, %v", ok, err)
	}
	if rsSignalled(ch, 300*time.Millisecond) {
		t.Errorf("signal for a prefix the glob characters would match")
	}
	if ok, err := rsStore(raw, newRSKey(secret).fn(), withPrefix("fax*[g]:")).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save = %v, %v", ok, err)
	}
	if !rsSignalled(ch, 2*time.Second) {
		t.Errorf("no signal for the store's own prefix")
	}
}

// TestRedisStoreUpdatesSurviveRestart: messages published while the
// subscription is down are lost, so resubscribing must itself signal.
func TestRedisStoreUpdatesSurviveRestart(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	var errs sync.Map
	sub := rsStore(raw, newRSKey(secret).fn(), func(o *tokencache.RedisOptions) {
		o.OnError = func(err error) { errs.Store(tokencache.OpOf(err), err.Error()) }
	})
	ch := rsUpdates(t, raw, sub, 1)

	srv.Kill()
	eventually.Eventually(t, 5*time.Second, "the subscriber noticing the outage", func() bool {
		_, ok := errs.Load("subscribe")
		return ok
	})
	srv.Restart(t)
	if !rsSignalled(ch, 5*time.Second) {
		t.Fatalf("no signal within 5s of the subscription coming back")
	}
	if msg, _ := errs.Load("subscribe"); strings.Contains(msg.(string), secret) {
		t.Errorf("subscribe error holds the key")
	}

	if ok, err := rsStore(raw, newRSKey(secret).fn()).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save after restart = %v, %v", ok, err)
	}
	if !rsSignalled(ch, 2*time.Second) {
		t.Errorf("no signal for a Save after the restart")
	}
}

// TestUpdatesSurviveAPanic: a panic in the subscription goroutine (here the
// key function, once, while a notification is judged) is logged with its
// stack and counted as a subscribe error; the subscription comes back, says
// so with a signal (notices may have been lost), and keeps signalling.
func TestUpdatesSurviveAPanic(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	c := newRedisconn(t, config.Redis{Addrs: []string{srv.Addr}})
	secret := rsRandom(t, "key")
	var armed atomic.Bool
	panicky := func() (tokencache.Secret, error) {
		if armed.CompareAndSwap(true, false) {
			panic("injected key failure")
		}
		return tokencache.NewSecret(secret), nil
	}
	core, logs := observer.New(zap.InfoLevel)
	var subErrs atomic.Int32
	sub := rsStore(c, panicky, func(o *tokencache.RedisOptions) {
		o.Logger = zap.New(core)
		o.OnError = func(error) { subErrs.Add(1) }
	})
	pub := rsStore(c, newRSKey(secret).fn())
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := sub.Updates(uctx)

	save := func() {
		t.Helper()
		tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)
		if ok, err := pub.Save(ctx, tok); !ok || err != nil {
			t.Fatalf("Save = %v, %v", ok, err)
		}
	}
	// Until the subscription is up, a save may go unseen.
	eventually.Eventually(t, 5*time.Second, "an update signal before the panic", func() bool {
		save()
		return rsSignalled(ch, 50*time.Millisecond)
	})
	armed.Store(true)
	save()
	// The panicked subscription pauses, resubscribes and signals.
	if !rsSignalled(ch, 5*time.Second) {
		t.Fatal("no signal after the panic: the subscription died")
	}
	if got := logs.FilterMessage(background.Msg).All(); len(got) != 1 || got[0].ContextMap()["loop"] != "token_updates" {
		t.Fatalf("panic lines %v, want one for loop token_updates", got)
	}
	if subErrs.Load() < 1 {
		t.Errorf("the panic was not reported through OnError")
	}
	save()
	if !rsSignalled(ch, 5*time.Second) {
		t.Fatal("no signal for a save after the recovery")
	}
}
