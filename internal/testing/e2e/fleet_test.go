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

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/base/clock"
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

func startFleet(t *testing.T, n int, ttl time.Duration, redisAddr string) *fleet {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key, TokenTTL: ttl})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	f := &fleet{sim: sim, up: up}
	for range n {
		f.gws = append(f.gws, gatewaytest.Start(t, gatewaytest.Options{Config: callers, Sim: sim, Upstream: up,
			RedisAddr: redisAddr, TokenTTL: ttl}))
	}
	return f
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
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	return tr
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

// TestFleetOneRenewalPerLifetime: five replicas, steady traffic over about
// two and a half token lifetimes. Without sharing each replica would call
// /v1/auth once per lifetime; with Redis the fleet calls it once.
func TestFleetOneRenewalPerLifetime(t *testing.T) {
	r := redistest.Start(t)
	const ttl = 5 * time.Second
	f := startFleet(t, 5, ttl, r.Addr)
	start := time.Now()
	tr := f.drive(t, 8)
	time.Sleep(12 * time.Second)
	tr.finish(t)
	elapsed := time.Since(start)
	lifetimes := int((elapsed + ttl - 1) / ttl)
	if n := f.sim.AuthCalls(); n > lifetimes+1 || n < 2 {
		t.Fatalf("auth calls = %d over %v (%d lifetimes of %v), want at most %d for the whole fleet",
			n, elapsed.Round(time.Millisecond), lifetimes, ttl, lifetimes+1)
	}
	var adopted float64
	for _, g := range f.gws {
		adopted += testutil.ToFloat64(g.Metrics.Tokens.Adopted.WithLabelValues("redis"))
	}
	if adopted < 4 {
		t.Fatalf("tokens adopted from Redis = %v, want every other replica to adopt", adopted)
	}
	t.Logf("%d requests, %d auth calls over %v", tr.ok.Load(), f.sim.AuthCalls(), elapsed.Round(time.Millisecond))
}

// TestRedisKillAndRestartUnderTraffic: Redis dies and comes back while the
// fleet serves and renews; no request fails, and the token is written back.
func TestRedisKillAndRestartUnderTraffic(t *testing.T) {
	r := redistest.Start(t)
	const ttl = 4 * time.Second
	f := startFleet(t, 3, ttl, r.Addr)
	tr := f.drive(t, 6)
	time.Sleep(time.Second)
	r.Kill()
	time.Sleep(4 * time.Second) // a renewal falls into the outage
	r.Restart(t)
	time.Sleep(3 * time.Second)
	tr.finish(t)
	var storeErrors float64
	for _, g := range f.gws {
		for _, op := range []string{"load", "save", "lease", "delete"} {
			storeErrors += testutil.ToFloat64(g.Metrics.Tokens.StoreErrors.WithLabelValues(op))
		}
		if ok, why := g.Tokens.Ready(); !ok {
			t.Fatalf("a replica is not ready after the outage: %s", why)
		}
	}
	if storeErrors == 0 {
		t.Fatal("the outage was not counted in faxgate_token_store_errors_total")
	}
	// Each replica renews directly at most once per lifetime while Redis is down.
	if n, max := f.sim.AuthCalls(), 1+3*3; n > max {
		t.Fatalf("auth calls = %d, want at most %d", n, max)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, err := r.Client(t).Keys(context.Background(), "faxgate:*").Result()
		if err == nil && len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no token written back to Redis after it returned")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFleet401CausesOneRenewal: the upstream revokes the token; every replica
// sees 401s at once, and the fleet renews once.
func TestFleet401CausesOneRenewal(t *testing.T) {
	r := redistest.Start(t)
	f := startFleet(t, 5, time.Hour, r.Addr)
	before := f.sim.AuthCalls()
	f.sim.RevokeTokens()
	tr := f.drive(t, 10)
	time.Sleep(2 * time.Second)
	tr.finish(t) // every 401 was resent with the new token
	if got := f.sim.AuthCalls() - before; got != 1 {
		t.Fatalf("auth calls after the revocation = %d, want 1 for the fleet", got)
	}
}

// TestRedisHoldsNothingReadable: every key and value in Redis, read raw, is
// free of the token and the key.
func TestRedisHoldsNothingReadable(t *testing.T) {
	r := redistest.Start(t)
	f := startFleet(t, 2, time.Hour, r.Addr)
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
	const ttl = 5 * time.Second
	f := startFleet(t, 3, ttl, r.Addr)
	tr := f.drive(t, 6)
	// The "crashed" replica: same account, takes the lease just before the
	// fleet's renewal is due (at about 4s) and never releases it.
	rc := r.Client(t)
	dead := tokencache.NewRedisStore(tokencache.RedisOptions{Client: rc, KeyPrefix: "faxgate:",
		Key: tokencache.StaticKey(tokencache.NewSecret(gatewaytest.Key)), Clock: clock.Real{}})
	time.Sleep(3 * time.Second)
	if _, ok, err := dead.Lease(context.Background(), 1500*time.Millisecond); err != nil || !ok {
		t.Fatalf("could not take the lease: ok=%v err=%v", ok, err)
	}
	before := f.sim.AuthCalls()
	time.Sleep(3500 * time.Millisecond) // past the lease's expiry and the first token's
	tr.finish(t)
	if got := f.sim.AuthCalls() - before; got != 1 {
		t.Fatalf("auth calls after the holder died = %d, want exactly 1 renewal by a survivor", got)
	}
	var busy float64
	for _, g := range f.gws {
		busy += testutil.ToFloat64(g.Metrics.Tokens.Lease.WithLabelValues("busy"))
	}
	if busy == 0 {
		t.Fatal("no replica found the lease busy: the test did not exercise the crash")
	}
}

// TestHotPathNeverWaitsOnRedis: Redis stops answering (SIGSTOP: connections
// hang, nothing is refused) across a renewal. Requests with a valid local
// token keep completing in milliseconds, and the renewal falls back to the
// token endpoint.
func TestHotPathNeverWaitsOnRedis(t *testing.T) {
	r := redistest.Start(t)
	// 5s tokens are renewed at 3.75-4s and sent until 4.75s: the renewal has
	// at least 750ms for the store's 500ms operation timeout and the token
	// call. (With 3s tokens it had 450-600ms, so on a loaded machine the
	// token lapsed and requests waited for the renewal: a flaky test, not
	// the behaviour under test.)
	const ttl = 5 * time.Second
	f := startFleet(t, 2, ttl, r.Addr)
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Signal(syscall.SIGCONT) })
	stalled := time.Now()
	client := &http.Client{Timeout: 10 * time.Second}
	var slowest time.Duration
	n := 0
	for time.Since(stalled) < 5*time.Second { // crosses the renewal at about 4s
		start := time.Now()
		resp, err := client.Post(f.gws[n%2].URL+"/v1/contacts/list", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d during the stall: HTTP %d", n, resp.StatusCode)
		}
		slowest = max(slowest, time.Since(start))
		n++
		time.Sleep(10 * time.Millisecond)
	}
	_ = r.Signal(syscall.SIGCONT)
	// The renewal waits for Redis for at most its operation timeout (500ms
	// in tests) before renewing directly, and that happens off the hot path.
	if slowest > 250*time.Millisecond {
		t.Fatalf("slowest request while Redis hung: %v over %d requests", slowest, n)
	}
	if f.sim.AuthCalls() < 2 {
		t.Fatal("no renewal happened during the stall: the test did not cross one")
	}
	t.Logf("%d requests while Redis hung, slowest %v, %d auth calls", n, slowest, f.sim.AuthCalls())
}
