package tokencache_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/tokencache"
	"github.com/redis/go-redis/v9"
)

type rsOpResult struct {
	op  string
	err error
	d   time.Duration
}

// rsOps runs every store operation once, in a fixed order, returning each
// one's error and duration.
func rsOps(ctx context.Context, st *tokencache.RedisStore, l tokencache.Lease) []rsOpResult {
	tok := rsToken("tok-outage", time.Now(), time.Hour, false)
	ops := []struct {
		op string
		f  func() error
	}{
		{"save", func() error { _, err := st.Save(ctx, tok); return err }},
		{"load", func() error { _, err := st.Load(ctx); return err }},
		{"delete", func() error { _, err := st.DeleteIf(ctx, tok); return err }},
		{"lease", func() error { _, _, err := st.Lease(ctx, time.Minute); return err }},
		{"extend", func() error { _, err := l.Extend(ctx, time.Minute); return err }},
		{"release", func() error { return l.Release(ctx) }},
	}
	var out []rsOpResult
	for _, o := range ops {
		start := time.Now()
		err := o.f()
		out = append(out, rsOpResult{o.op, err, time.Since(start)})
	}
	return out
}

func TestRedisStoreOutageFailsFastAndRecovers(t *testing.T) {
	const opTimeout = 300 * time.Millisecond
	const slack = 500 * time.Millisecond
	secret := rsRandom(t, "key")

	for _, outage := range []string{"killed", "hung"} {
		t.Run(outage, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := rsCtx(t)
			// The production client, so its options are what is tested.
			c := newRedisconn(t, config.Redis{Addrs: []string{srv.Addr}})
			st := rsStore(c, newRSKey(secret).fn(), func(o *tokencache.RedisOptions) { o.OpTimeout = opTimeout })
			l, ok, err := st.Lease(ctx, time.Minute)
			if !ok || err != nil {
				t.Fatalf("Lease = %v, %v", ok, err)
			}

			if outage == "killed" {
				srv.Kill()
			} else {
				// A stopped process keeps its socket: connections are accepted
				// by the kernel and never answered, the worst case for a client.
				rsSignal(t, srv, syscall.SIGSTOP)
			}
			for _, r := range rsOps(ctx, st, l) {
				op := r.op
				if r.err == nil {
					t.Errorf("%s during the outage: no error", op)
					continue
				}
				if got := tokencache.OpOf(r.err); got != op {
					t.Errorf("OpOf(%s error) = %q", op, got)
				}
				if r.d > opTimeout+slack {
					t.Errorf("%s took %v, want at most %v", op, r.d, opTimeout+slack)
				}
				if strings.Contains(r.err.Error(), secret) || strings.Contains(r.err.Error(), "tok-outage") {
					t.Errorf("%s error holds the key or the token: %v", op, r.err)
				}
			}

			if outage == "killed" {
				srv.Restart(t)
			} else {
				rsSignal(t, srv, syscall.SIGCONT)
			}
			// The same client reconnects (after a restart, the data is gone and
			// the old lease with it). go-redis may need a moment: after as many
			// failed dials as its pool size it fails fast and redials in the
			// background once a second.
			eventually.EventuallyErr(t, 5*time.Second, "every operation working after recovery", func() error {
				l2, _, _ := st.Lease(ctx, time.Minute)
				if l2 == nil {
					l2 = l
				}
				for _, r := range rsOps(ctx, st, l2) {
					if r.err != nil {
						return fmt.Errorf("%s: %w", r.op, r.err)
					}
				}
				return nil
			})
			tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)
			if ok, err := st.Save(ctx, tok); !ok || err != nil {
				t.Fatalf("Save after recovery = %v, %v", ok, err)
			}
			got, err := st.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sameToken(t, got, tok)
		})
	}
}

func rsSignal(t *testing.T, srv *redistest.Server, sig syscall.Signal) {
	t.Helper()
	if err := srv.Signal(sig); err != nil {
		t.Fatalf("signalling redis-server: %v", err)
	}
}

// newRedisconn is the client of redisconn.New, as faxgate serve builds it,
// closed when the test ends.
func newRedisconn(t testing.TB, c config.Redis) redis.UniversalClient {
	t.Helper()
	rc, err := redisconn.New(c, redisconn.Passwords{}, redisconn.Options{})
	if err != nil {
		t.Fatalf("redisconn.New: %v", err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	return rc.Client()
}
