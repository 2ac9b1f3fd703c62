package failover_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/tokencache"
)

// config is every gateway's: one caller whose rate limit and the tenant
// budget are decided in Redis on every request (high enough never to
// refuse), holds on, and a warning-level log.
const config = `
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
      rate_limit: { rps: 100000, burst: 100000 }
rate_limit:
  replicas_hint: 2
upstream_budget:
  limits:
    - { name: tenant, scope: tenant, requests: 1000000, per: 1m }
log:
  level: warn
`

// Bounds every scenario judges against (docs/deployment.md, Redis in
// production).
const (
	// fleetWideWithin: decisions fleet-wide again after the promotion.
	fleetWideWithin = 15 * time.Second
	// holdWithin: a Retry-After hold reaches every replica.
	holdWithin = time.Second
	// upstreamTimeout is every gateway's upstream.timeout: no request may
	// take longer.
	upstreamTimeout = 5 * time.Second
)

// fleet is two gateway replicas sharing one Redis topology in front of one
// simulator.
type fleet struct {
	sim    *faxsim.Sim
	vendor *vendor
	gws    []*gatewaytest.Gateway
}

// startFleet starts two gateways on r in front of one simulator whose
// tokens live ttl.
func startFleet(t *testing.T, r *gatewaytest.Redis, ttl time.Duration) *fleet {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key, TokenTTL: ttl})
	v := &vendor{next: sim, throttle: map[string]bool{}}
	up := httptest.NewServer(v)
	t.Cleanup(up.Close)
	f := &fleet{sim: sim, vendor: v}
	for range 2 {
		f.gws = append(f.gws, gatewaytest.Start(t, gatewaytest.Options{Config: config, Sim: sim, Upstream: up,
			Redis: r, TokenTTL: ttl, UpstreamTimeout: upstreamTimeout,
			// A loaded CI machine must not send a healthy Redis's answers
			// to the fallback; a dead one still fails at once.
			RateLimitTimeout: 250 * time.Millisecond}))
	}
	return f
}

// vendor is the simulator behind a switch that answers the next request
// for a path with 429 and Retry-After: 2.
type vendor struct {
	next     http.Handler
	mu       sync.Mutex
	throttle map[string]bool
}

func (v *vendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	hit := v.throttle[r.URL.Path]
	delete(v.throttle, r.URL.Path)
	v.mu.Unlock()
	if hit {
		w.Header().Set("Retry-After", "2")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"status":0,"message":"Too many requests."}`))
		return
	}
	v.next.ServeHTTP(w, r)
}

// traffic is steady, bounded load: workers send POST /v1/contacts/list
// round-robin over the fleet, each pausing between requests, until stop.
type traffic struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	sent    atomic.Int64
	mu      sync.Mutex
	failed  []string
	slowest time.Duration
}

// maxPerWorker bounds a worker's requests, whatever the test's length.
const maxPerWorker = 5000

func (f *fleet) drive(workers int) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	for w := range workers {
		tr.wg.Go(func() {
			client := &http.Client{Timeout: 2 * upstreamTimeout}
			for i := range maxPerWorker {
				select {
				case <-tr.stop:
					return
				default:
				}
				g := f.gws[(w+i)%len(f.gws)]
				start := time.Now()
				resp, err := client.Post(g.URL+"/v1/contacts/list", "application/json", strings.NewReader(`{}`))
				d := time.Since(start)
				tr.sent.Add(1)
				tr.mu.Lock()
				tr.slowest = max(tr.slowest, d)
				switch {
				case err != nil:
					tr.failed = append(tr.failed, err.Error())
				case resp.StatusCode != http.StatusOK:
					tr.failed = append(tr.failed, fmt.Sprintf("gateway %d: HTTP %d %s", (w+i)%len(f.gws), resp.StatusCode,
						resp.Header.Get("X-Faxgate-Error")))
				}
				tr.mu.Unlock()
				if resp != nil {
					resp.Body.Close()
				}
				time.Sleep(10 * time.Millisecond) // paces the load: about 100 requests/s per worker at most
			}
		})
	}
	return tr
}

// finish stops the load and judges it: every request answered 200, none
// slower than upstream.timeout. It returns the requests sent, how many
// failed and the slowest one's time.
func (tr *traffic) finish(t *testing.T) (sent int64, failed int, slowest time.Duration) {
	t.Helper()
	close(tr.stop)
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.sent.Load() == 0 {
		t.Fatal("no request sent")
	}
	if len(tr.failed) > 0 {
		t.Errorf("%d of %d requests failed: %q", len(tr.failed), tr.sent.Load(), tr.failed[:min(len(tr.failed), 10)])
	}
	if tr.slowest >= upstreamTimeout {
		t.Errorf("the slowest request took %v, want less than upstream.timeout %v", tr.slowest, upstreamTimeout)
	}
	return tr.sent.Load(), len(tr.failed), tr.slowest
}

// fallbacks is a gateway's count of decisions made locally: rate limit and
// budget.
func fallbacks(g *gatewaytest.Gateway) float64 {
	return testutil.ToFloat64(g.Metrics.Limits.RateLimitFallback.WithLabelValues("svc")) +
		testutil.ToFloat64(g.Metrics.Limits.BudgetFallback)
}

// storeOps are the op values of faxgate_token_store_errors_total.
var storeOps = []string{"load", "save", "delete", "lease", "extend", "release", "subscribe"}

func storeErrors(g *gatewaytest.Gateway) float64 {
	var n float64
	for _, op := range storeOps {
		n += testutil.ToFloat64(g.Metrics.Tokens.StoreErrors.WithLabelValues(op))
	}
	return n
}

// storeErrorsByOp is the fleet's token store errors by op, those at 0 left
// out.
func (f *fleet) storeErrorsByOp() map[string]float64 {
	out := map[string]float64{}
	for _, g := range f.gws {
		for _, op := range storeOps {
			if n := testutil.ToFloat64(g.Metrics.Tokens.StoreErrors.WithLabelValues(op)); n > 0 {
				out[op] += n
			}
		}
	}
	return out
}

// healthy judges the topology healthy and shared: the rate limits and the
// budget decided in Redis (backend up, no fallback), no token store error,
// and one token for the fleet.
func (f *fleet) healthy(t *testing.T, phase string) {
	t.Helper()
	var tok *tokencache.Token
	for i, g := range f.gws {
		eventually.Eventually(t, 5*time.Second, fmt.Sprintf("%s: gateway %d's rate limits decided in Redis", phase, i), func() bool {
			return testutil.ToFloat64(g.Metrics.Limits.RateLimitBackendUp.WithLabelValues()) == 1
		})
		if n := fallbacks(g); n != 0 {
			t.Errorf("%s: gateway %d made %v decisions locally", phase, i, n)
		}
		if n := storeErrors(g); n != 0 {
			t.Errorf("%s: gateway %d counted %v token store errors", phase, i, n)
		}
		cur := g.Tokens.Current()
		if tok == nil {
			tok = cur
		} else if cur == nil || !cur.Value.Equal(tok.Value) {
			t.Errorf("%s: the replicas hold two tokens", phase)
		}
	}
}

// holdReachesAll makes the vendor answer 429 to one request through
// gateway from, and judges that every other replica holds the route within
// holdWithin. It returns how long the slowest took.
func (f *fleet) holdReachesAll(t *testing.T, from int) time.Duration {
	t.Helper()
	const path, route = "/v1/esign_templates", "esign.templates.list"
	f.vendor.mu.Lock()
	f.vendor.throttle[path] = true
	f.vendor.mu.Unlock()
	resp, _ := f.gws[from].Do(t, "GET", path, "")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the vendor's 429 through gateway %d: HTTP %d", from, resp.StatusCode)
	}
	start := time.Now()
	var slowest time.Duration
	for i, g := range f.gws {
		if i == from {
			continue
		}
		eventually.Eventually(t, holdWithin, fmt.Sprintf("gateway %d holding %s after gateway %d's 429", i, route, from), func() bool {
			_, held := g.Gateway.Holds.Held(route)
			return held
		})
		slowest = max(slowest, time.Since(start))
	}
	return slowest
}

// fleetWide watches every replica's local decisions from now on, and
// reports when each last made one.
type fleetWide struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	last []time.Time // per gateway, the last time its fallback count rose
	f    *fleet
}

func (f *fleet) watchFallbacks() *fleetWide {
	w := &fleetWide{stop: make(chan struct{}), done: make(chan struct{}), last: make([]time.Time, len(f.gws)), f: f}
	prev := make([]float64, len(f.gws))
	for i, g := range f.gws {
		prev[i] = fallbacks(g)
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			for i, g := range f.gws {
				if n := fallbacks(g); n != prev[i] {
					prev[i] = n
					w.mu.Lock()
					w.last[i] = time.Now()
					w.mu.Unlock()
				}
			}
		}
	}()
	return w
}

// settled waits until no replica has decided locally for quiet after
// from, and returns when the last local decision was (zero when there was
// none).
func (w *fleetWide) settled(t *testing.T, from time.Time, quiet time.Duration) time.Time {
	t.Helper()
	var last time.Time
	eventually.Eventually(t, fleetWideWithin+10*time.Second, "no local decision for "+quiet.String(), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		last = time.Time{}
		for _, l := range w.last {
			if l.After(last) {
				last = l
			}
		}
		if from.After(last) {
			return time.Since(from) >= quiet
		}
		return time.Since(last) >= quiet
	})
	close(w.stop)
	<-w.done
	return last
}

// fallbackDecisions is the fleet's local decisions in all.
func (f *fleet) fallbackDecisions() float64 {
	var n float64
	for _, g := range f.gws {
		n += fallbacks(g)
	}
	return n
}

// revokeRenewsOnce revokes every token at the vendor while traffic flows,
// and judges that the fleet renews exactly once and ends on one token.
func (f *fleet) revokeRenewsOnce(t *testing.T) {
	t.Helper()
	old := f.gws[0].Tokens.Current()
	if old.By401 {
		// A token renewed because of a 401 is not renewed again because of
		// a 401 while young (docs/tokens.md): the 401 would be relayed.
		guard := min(30*time.Second, old.Lifetime()/10)
		eventually.Eventually(t, guard+5*time.Second, "the token renewed after a 401 out of its guard", func() bool {
			return time.Since(old.Issued) > guard
		})
	}
	before := f.sim.AuthCalls()
	f.sim.RevokeTokens()
	eventually.Eventually(t, 10*time.Second, "every replica on a token issued after the revocation", func() bool {
		for _, g := range f.gws {
			if c := g.Tokens.Current(); c == nil || c.Value.Equal(old.Value) || !c.Issued.After(old.Issued) {
				return false
			}
		}
		return true
	})
	if n := f.sim.AuthCalls() - before; n != 1 {
		t.Errorf("token calls for one revocation = %d, want 1 for the fleet", n)
	}
}

// tokensIssued judges what the vendor saw presented: no token it did not
// issue, none expired.
func (f *fleet) tokensIssued(t *testing.T) faxsim.TokenStats {
	t.Helper()
	st := f.sim.TokenStats()
	if st.Unknown != 0 || st.Expired != 0 {
		t.Errorf("tokens presented: %+v; want none unknown or expired", st)
	}
	return st
}

// result is one scenario's measurements, logged in one line for the docs.
type result struct {
	scenario                  string
	promoted, fleetWide, hold time.Duration
	requests                  int64
	failed                    int
	slowest                   time.Duration
	authCalls                 int
	localDecisions            float64
	storeErrors               map[string]float64
	tokens                    faxsim.TokenStats
}

func (r result) log(t *testing.T) {
	t.Logf("RESULT %s: promoted %v after the fault; fleet-wide %v after the promotion; hold reached the other replica in %v; "+
		"%d requests, %d failed, slowest %v; %d token calls; %v local decisions; token store errors %v; tokens presented %+v",
		r.scenario, r.promoted.Round(time.Millisecond), r.fleetWide.Round(time.Millisecond), r.hold.Round(time.Millisecond),
		r.requests, r.failed, r.slowest.Round(time.Millisecond), r.authCalls, r.localDecisions, r.storeErrors, r.tokens)
}

// scenario runs one failover under load and judges it. Before the fault
// the topology is healthy and shared (and a hold reaches the other
// replica); fault breaks it, and promoted waits for the new primary and
// returns when it was seen. Then: no request failed or took
// upstream.timeout, decisions were fleet-wide again within
// fleetWideWithin of the promotion, the failover cost no token call, a
// hold reaches every replica again, a revocation renews once, and no
// token the upstream did not issue was sent.
func scenario(t *testing.T, name string, r *gatewaytest.Redis, fault func(), promoted func() time.Time) result {
	t.Helper()
	f := startFleet(t, r, time.Hour)
	tr := f.drive(2)
	f.healthy(t, "before the failover")
	f.holdReachesAll(t, 0)
	res := result{scenario: name}
	authBefore := f.sim.AuthCalls()
	watch := f.watchFallbacks()

	faulted := time.Now()
	fault()
	at := promoted()
	res.promoted = at.Sub(faulted)
	last := watch.settled(t, at, 3*time.Second)
	if last.After(at) {
		res.fleetWide = last.Sub(at)
	}
	if res.fleetWide > fleetWideWithin {
		t.Errorf("decisions were local until %v after the promotion, want within %v", res.fleetWide, fleetWideWithin)
	}
	res.authCalls = f.sim.AuthCalls() - authBefore
	if res.authCalls > 1 {
		t.Errorf("the failover cost %d token calls, want at most 1", res.authCalls)
	}
	res.localDecisions = f.fallbackDecisions()
	res.storeErrors = f.storeErrorsByOp()
	for i, g := range f.gws {
		if up := testutil.ToFloat64(g.Metrics.Limits.RateLimitBackendUp.WithLabelValues()); up != 1 {
			t.Errorf("gateway %d: faxgate_rate_limit_backend_up = %v after the failover, want 1", i, up)
		}
	}
	res.hold = f.holdReachesAll(t, 1)
	f.revokeRenewsOnce(t)
	res.requests, res.failed, res.slowest = tr.finish(t)
	res.tokens = f.tokensIssued(t)
	res.log(t)
	return res
}
