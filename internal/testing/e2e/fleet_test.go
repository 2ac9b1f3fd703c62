package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/tokencache"
)

const callers = `
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
rate_limit:
  default: { rps: 100000, burst: 100000 }
log:
  level: warn
`

type fleet struct {
	sim *faxsim.Sim
	up  *httptest.Server
	gws []*gatewaytest.Gateway
}

// startFleet starts n replicas sharing redisAddr in front of one simulator
// (tokens of a day), on clk (nil: the real clock).
func startFleet(t *testing.T, n int, clk clock.Clock, redisAddr string) *fleet {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	f := &fleet{sim: sim, up: up}
	for range n {
		f.gws = append(f.gws, gatewaytest.Start(t, gatewaytest.Options{Config: callers, Sim: sim, Upstream: up,
			RedisAddr: redisAddr, Clock: clk}))
	}
	return f
}

// renewalDue is when every replica holding tok is due to renew it:
// refresh_before ahead of its expiry (jitter only moves a renewal earlier).
func (f *fleet) renewalDue(tok *tokencache.Token) time.Time {
	return tok.Expiry.Add(-min(f.gws[0].Config.Token.RefreshBefore, tok.Lifetime()/2))
}

// renewedFrom reports whether every replica holds one same token, newer
// than old.
func (f *fleet) renewedFrom(old *tokencache.Token) bool {
	first := f.gws[0].Tokens.Current()
	for _, g := range f.gws {
		cur := g.Tokens.Current()
		if cur == nil || !cur.Expiry.After(old.Expiry) || !cur.Value.Equal(first.Value) {
			return false
		}
	}
	return true
}

// sum adds up one counter or gauge over the fleet.
func (f *fleet) sum(m func(*gatewaytest.Gateway) prometheus.Collector) float64 {
	var n float64
	for _, g := range f.gws {
		n += testutil.ToFloat64(m(g))
	}
	return n
}

// traffic sends requests round-robin over the fleet from several workers
// until stop closes, and counts answers that are not 200.
type traffic struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string
	wg         sync.WaitGroup
	stop       chan struct{}
}

func (f *fleet) drive(t *testing.T, workers int) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	for w := range workers {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for i := w; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				g := f.gws[i%len(f.gws)]
				resp, err := client.Post(g.URL+"/v1/contacts/list", "application/json", strings.NewReader(`{}`))
				if err == nil {
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != 200 {
					tr.failed.Add(1)
					tr.mu.Lock()
					if len(tr.failures) < 10 {
						if err != nil {
							tr.failures = append(tr.failures, err.Error())
						} else {
							tr.failures = append(tr.failures, fmt.Sprintf("gateway %d: HTTP %d", i%len(f.gws), resp.StatusCode))
						}
					}
					tr.mu.Unlock()
				} else {
					tr.ok.Add(1)
				}
				time.Sleep(5 * time.Millisecond) // paces the load: steady, not flat out
			}
		}()
	}
	return tr
}

// waitServed waits for n more requests answered 200.
func (tr *traffic) waitServed(t *testing.T, n int64) {
	t.Helper()
	want := tr.ok.Load() + n
	eventually.Eventually(t, 10*time.Second, fmt.Sprintf("%d more requests served", n), func() bool { return tr.ok.Load() >= want })
}

func (tr *traffic) finish(t *testing.T) {
	t.Helper()
	close(tr.stop)
	tr.wg.Wait()
	if tr.ok.Load() == 0 {
		t.Fatal("no request succeeded")
	}
	if n := tr.failed.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed: %v", n, n+tr.ok.Load(), tr.failures)
	}
}

// TestFleetOneRenewalPerLifetime: five replicas under steady traffic over
// two token lifetimes. Without sharing each replica would call /v1/auth
// once per lifetime; with Redis the fleet calls it once. The replicas'
// clock jumps to each renewal, so all five are due at the same moment.
func TestFleetOneRenewalPerLifetime(t *testing.T) {
	r := redistest.Start(t)
	clk := newJumpClock()
	f := startFleet(t, 5, clk, r.Addr)
	tr := f.drive(t, 8)
	const lifetimes = 2
	for i := range lifetimes {
		tr.waitServed(t, 20)
		tok := f.gws[0].Tokens.Current()
		clk.JumpTo(f.renewalDue(tok))
		eventually.Eventually(t, 10*time.Second, fmt.Sprintf("renewal %d held by every replica", i+1),
			func() bool { return f.renewedFrom(tok) })
	}
	tr.finish(t)
	if n := f.sim.AuthCalls(); n != 1+lifetimes {
		t.Fatalf("auth calls = %d over %d renewals, want %d: one per lifetime for the whole fleet", n, lifetimes, 1+lifetimes)
	}
	adopted := f.sum(func(g *gatewaytest.Gateway) prometheus.Collector {
		return g.Metrics.Tokens.Adopted.WithLabelValues("redis")
	})
	if want := float64(4 * (1 + lifetimes)); adopted < want {
		t.Fatalf("tokens adopted from Redis = %v, want every other replica to adopt each token (%v)", adopted, want)
	}
	t.Logf("%d requests, %d auth calls over %d renewals", tr.ok.Load(), f.sim.AuthCalls(), lifetimes)
}

// TestRedisKillAndRestartUnderTraffic: Redis dies while the fleet serves,
// a renewal falls into the outage (the replicas' clock jumps to it), and
// Redis comes back: no request fails, each replica renews directly once,
// and the token is written back.
func TestRedisKillAndRestartUnderTraffic(t *testing.T) {
	r := redistest.Start(t)
	clk := newJumpClock()
	f := startFleet(t, 3, clk, r.Addr)
	tr := f.drive(t, 6)
	tr.waitServed(t, 20)
	tok := f.gws[0].Tokens.Current()
	r.Kill()
	clk.JumpTo(f.renewalDue(tok))
	unsynced := func() float64 {
		return f.sum(func(g *gatewaytest.Gateway) prometheus.Collector { return g.Metrics.Tokens.Unsynced })
	}
	// Each replica renews directly and keeps the token to write back.
	eventually.Eventually(t, 10*time.Second, "every replica renewed during the outage", func() bool { return unsynced() == 3 })
	r.Restart(t)
	eventually.EventuallyErr(t, 10*time.Second, "the token written back to Redis", func() error {
		if n := unsynced(); n != 0 {
			return fmt.Errorf("%v replicas still hold a token to write back", n)
		}
		keys, err := r.Client(t).Keys(context.Background(), "faxgate:*").Result()
		if err == nil && len(keys) == 0 {
			err = fmt.Errorf("no faxgate key in Redis")
		}
		return err
	})
	tr.finish(t)
	var storeErrors float64
	for _, op := range []string{"load", "save", "lease", "delete"} {
		storeErrors += f.sum(func(g *gatewaytest.Gateway) prometheus.Collector {
			return g.Metrics.Tokens.StoreErrors.WithLabelValues(op)
		})
	}
	for _, g := range f.gws {
		if ok, why := g.Tokens.Ready(); !ok {
			t.Fatalf("a replica is not ready after the outage: %s", why)
		}
	}
	if storeErrors == 0 {
		t.Fatal("the outage was not counted in faxgate_token_store_errors_total")
	}
	// Each replica renews directly at most once per lifetime while Redis is down.
	if n, max := f.sim.AuthCalls(), 1+3; n > max {
		t.Fatalf("auth calls = %d, want at most %d", n, max)
	}
}

// TestFleet401CausesOneRenewal: the upstream revokes the token; every replica
// sees 401s at once, and the fleet renews once.
func TestFleet401CausesOneRenewal(t *testing.T) {
	r := redistest.Start(t)
	f := startFleet(t, 5, nil, r.Addr)
	before := f.sim.AuthCalls()
	tok := f.gws[0].Tokens.Current()
	f.sim.RevokeTokens()
	tr := f.drive(t, 10)
	// Every replica serves with the new token; finish then waits for the
	// requests still in flight, the ones a late 401 could make renew again.
	eventually.Eventually(t, 10*time.Second, "every replica on the new token", func() bool {
		return f.renewedFrom(tok) && tr.ok.Load() >= 50
	})
	tr.finish(t) // every 401 was resent with the new token
	if got := f.sim.AuthCalls() - before; got != 1 {
		t.Fatalf("auth calls after the revocation = %d, want 1 for the fleet", got)
	}
}

// TestRedisHoldsNothingReadable: every key and value in Redis, read raw, is
// free of the token and the key.
func TestRedisHoldsNothingReadable(t *testing.T) {
	r := redistest.Start(t)
	f := startFleet(t, 2, nil, r.Addr)
	ctx := context.Background()
	tok, err := f.gws[0].Tokens.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Client(t)
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys = %v, %v", keys, err)
	}
	for _, k := range keys {
		v, _ := c.Dump(ctx, k).Result()
		for _, s := range []string{k, v} {
			if strings.Contains(s, tok.Value.Reveal()) || strings.Contains(s, gatewaytest.Key) {
				t.Fatalf("Redis key %q holds a credential in the clear", k)
			}
		}
	}
}

// TestLeaseHolderCrashCausesNoGap: a replica took the renewal lease and died
// before renewing. The fleet keeps serving the current token, and once the
// dead holder's lease expires one replica renews, before the token expires.
func TestLeaseHolderCrashCausesNoGap(t *testing.T) {
	r := redistest.Start(t)
	clk := newJumpClock()
	f := startFleet(t, 3, clk, r.Addr)
	tr := f.drive(t, 6)
	tr.waitServed(t, 20)
	// The "crashed" replica: same account, takes the lease and never
	// releases it. Redis lets it go after leaseTTL.
	const leaseTTL = 1500 * time.Millisecond
	rc := r.Client(t)
	dead := tokencache.NewRedisStore(tokencache.RedisOptions{Client: rc, KeyPrefix: "faxgate:",
		Key: tokencache.StaticKey(tokencache.NewSecret(gatewaytest.Key)), Clock: clock.Real{}})
	if _, ok, err := dead.Lease(context.Background(), leaseTTL); err != nil || !ok {
		t.Fatalf("could not take the lease: ok=%v err=%v", ok, err)
	}
	before := f.sim.AuthCalls()
	tok := f.gws[0].Tokens.Current()
	// Every replica's renewal is overdue, and the token has a little more
	// than the lease's TTL left (on the replicas' clock, which runs on in
	// real time): the renewal must wait out the dead holder, then be quick.
	left := 3 * leaseTTL
	clk.JumpTo(tok.Expiry.Add(-left))
	eventually.Eventually(t, 5*time.Second, "a replica finding the dead holder's lease", func() bool {
		return f.sum(func(g *gatewaytest.Gateway) prometheus.Collector {
			return g.Metrics.Tokens.Lease.WithLabelValues("busy")
		}) > 0
	})
	eventually.Eventually(t, left, "every replica on a token renewed by a survivor", func() bool { return f.renewedFrom(tok) })
	if now := clk.Now(); !now.Before(tok.Expiry) {
		t.Errorf("the fleet had a new token %v after the old one expired", now.Sub(tok.Expiry))
	}
	tr.finish(t)
	if got := f.sim.AuthCalls() - before; got != 1 {
		t.Fatalf("auth calls after the holder died = %d, want exactly 1 renewal by a survivor", got)
	}
}

// TestHotPathNeverWaitsOnRedis: Redis stops answering (SIGSTOP: connections
// hang, nothing is refused) across a renewal. Requests with a valid local
// token keep completing in milliseconds, and the renewal falls back to the
// token endpoint once the store's operation times out.
func TestHotPathNeverWaitsOnRedis(t *testing.T) {
	r := redistest.Start(t)
	clk := newJumpClock()
	f := startFleet(t, 2, clk, r.Addr)
	tok := f.gws[0].Tokens.Current()
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Signal(syscall.SIGCONT) })
	stop := make(chan struct{})
	done := make(chan struct{})
	var slowest time.Duration
	var served atomic.Int64
	var failure error
	go func() {
		defer close(done)
		client := &http.Client{Timeout: 10 * time.Second}
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			resp, err := client.Post(f.gws[n%2].URL+"/v1/contacts/list", "application/json", strings.NewReader(`{}`))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("HTTP %d", resp.StatusCode)
				}
			}
			if err != nil {
				failure = fmt.Errorf("request %d during the stall: %w", n, err)
				return
			}
			slowest = max(slowest, time.Since(start))
			served.Add(1)
			time.Sleep(10 * time.Millisecond) // paces the requests: one at a time, steadily
		}
	}()
	eventually.Eventually(t, 10*time.Second, "20 requests while Redis hangs", func() bool { return served.Load() >= 20 })
	// The renewal comes due while Redis hangs: each replica's store calls
	// time out, and it renews directly.
	clk.JumpTo(f.renewalDue(tok))
	eventually.Eventually(t, 10*time.Second, "a renewal during the stall", func() bool {
		select {
		case <-done:
			return true // failed; reported below
		default:
		}
		for _, g := range f.gws {
			if cur := g.Tokens.Current(); cur == nil || !cur.Expiry.After(tok.Expiry) {
				return false
			}
		}
		return true
	})
	close(stop)
	<-done
	_ = r.Signal(syscall.SIGCONT)
	if failure != nil {
		t.Fatal(failure)
	}
	// A request that waited on Redis would take at least the store's
	// operation timeout.
	if slowest >= gatewaytest.RedisOpTimeout {
		t.Fatalf("slowest request while Redis hung: %v over %d requests", slowest, served.Load())
	}
	if f.sim.AuthCalls() < 2 {
		t.Fatal("no renewal happened during the stall: the test did not cross one")
	}
	t.Logf("%d requests while Redis hung, slowest %v, %d auth calls", served.Load(), slowest, f.sim.AuthCalls())
}
