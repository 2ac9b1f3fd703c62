package e2e_test

// Shared rate limits across real gateways (rate_limit.backend: redis): the
// fleet admits what one gateway with the caller's limit would, and a Redis
// outage falls back to rps / replicas_hint per replica.

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// rateLimitedFleetConfig identifies every local client as "svc".
const rateLimitedFleetConfig = `
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
      rate_limit: { rps: %v, burst: %d }
rate_limit:
  replicas_hint: %d
log:
  level: warn
`

// load is what driveAtRate saw.
type load struct {
	ok, limited atomic.Int64
	// sent counts requests sent; a starved test machine sends fewer than asked.
	sent int
	// span is from the first request sent to the last answer.
	span     time.Duration
	mu       sync.Mutex
	problems []string
	// refused holds when each 429 was sent and answered.
	refused []exchange
}

// exchange is when a request was sent and when its answer arrived: the
// limiter decided it somewhere in between.
type exchange struct{ sent, answered time.Time }

func (l *load) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.problems) < 10 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// driveAtRate sends rate requests per second, round-robin over gws, for d,
// and checks every answer: 200 or 429 rate_limited, with the headers that
// docs/callers-and-policy.md promises. limit, when not "", is the
// RateLimit-Limit every answer must carry.
func driveAtRate(gws []*gatewaytest.Gateway, rate float64, d time.Duration, limit string) *load {
	l := &load{}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	end := time.After(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		select {
		case <-end:
			wg.Wait()
			l.span = time.Since(start)
			return l
		case <-tick.C:
		}
		g := gws[i%len(gws)]
		l.sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			resp, err := g.Client.Post(g.URL+"/v1/contacts/list", "application/json", strings.NewReader(`{}`))
			if err != nil {
				l.problem("%v", err)
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			answered := time.Now()
			if err != nil {
				l.problem("reading the body: %v", err)
				return
			}
			body := string(b)
			h := resp.Header
			if limit != "" && h.Get("RateLimit-Limit") != limit {
				l.problem("HTTP %d with RateLimit-Limit %q, want %s", resp.StatusCode, h.Get("RateLimit-Limit"), limit)
			}
			for _, k := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
				if _, err := strconv.Atoi(h.Get(k)); err != nil {
					l.problem("HTTP %d without a numeric %s: %q", resp.StatusCode, k, h.Get(k))
				}
			}
			switch resp.StatusCode {
			case http.StatusOK:
				l.ok.Add(1)
			case http.StatusTooManyRequests:
				l.limited.Add(1)
				l.mu.Lock()
				l.refused = append(l.refused, exchange{sent, answered})
				l.mu.Unlock()
				if !strings.Contains(body, `"error":"rate_limited"`) {
					l.problem("429 body %q", body)
				}
				if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 {
					l.problem("429 with Retry-After %q", h.Get("Retry-After"))
				}
				if h.Get("RateLimit-Remaining") != "0" {
					l.problem("429 with RateLimit-Remaining %q", h.Get("RateLimit-Remaining"))
				}
			default:
				l.problem("HTTP %d: %s", resp.StatusCode, body)
			}
		}()
	}
}

func (l *load) check(t *testing.T) {
	t.Helper()
	if len(l.problems) > 0 {
		t.Errorf("bad answers: %v", l.problems)
	}
}

// admittedBounds is what a token bucket of rate and burst admits of l, as
// bounds that hold however busy the machine: at most burst plus rate times
// the whole span; at least rate times the time between the first refusal
// and the last, plus burst-1 when the bucket started full. A refusal means
// the bucket held less than one request, so everything it gained between
// two refusals was admitted. That holds while demand keeps the bucket from
// filling up between them (burst/rate seconds without a single request),
// which a driver at twice the rate or more does not leave.
func (l *load) admittedBounds(rate, burst float64, full bool) (low, high float64) {
	high = rate*l.span.Seconds() + burst + 1
	if len(l.refused) < 2 {
		return 0, high
	}
	first, last := l.refused[0].answered, l.refused[0].sent
	for _, e := range l.refused {
		if e.answered.Before(first) {
			first = e.answered
		}
		if e.sent.After(last) {
			last = e.sent
		}
	}
	if last.After(first) {
		low = rate*last.Sub(first).Seconds() - 1
	}
	if full {
		low += burst - 1
	}
	return low, high
}

// judgeAdmitted checks that the number admitted, got, is within what a
// token bucket of rate and burst could admit of l.
func (l *load) judgeAdmitted(t *testing.T, what string, got, rate, burst float64, full bool) {
	t.Helper()
	low, high := l.admittedBounds(rate, burst, full)
	t.Logf("%s: admitted %v, a limiter of %v rps and burst %v admits %.1f to %.1f of this traffic", what, got, rate, burst, low, high)
	if got < low || got > high {
		t.Errorf("%s: admitted %v, want %.1f to %.1f (%v rps, burst %v, %d requests over %v)",
			what, got, low, high, rate, burst, l.sent, l.span)
	}
}

func newSim(t *testing.T) (*faxsim.Sim, *httptest.Server) {
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	return sim, up
}

// TestRedisFleetSharesOneLimit: three replicas, one caller at three times
// its limit spread over them for 10s; the fleet admits what one limiter of
// rps and burst admits of that traffic (rps x 10s + burst on an idle
// machine), every decision made once in Redis, and the upstream sees
// exactly what was admitted.
func TestRedisFleetSharesOneLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("10s measurement")
	}
	r := redistest.Start(t)
	sim, up := newSim(t)
	const rps, burst = 20.0, 10
	var gws []*gatewaytest.Gateway
	for range 3 {
		gws = append(gws, gatewaytest.Start(t, gatewaytest.Options{Sim: sim, Upstream: up,
			Config: fmt.Sprintf(rateLimitedFleetConfig, rps, burst, 3), RateLimitRedisAddr: r.Addr,
			RateLimitTimeout: 5 * time.Second}))
	}
	sim.Reset()

	const d = 10 * time.Second
	l := driveAtRate(gws, 3*rps, d, strconv.Itoa(burst))
	l.check(t)
	want := rps*d.Seconds() + burst
	got := float64(l.ok.Load())
	t.Logf("sent %d, admitted %v (expected rps x seconds + burst = %v, %+.1f%%), refused %d; upstream saw %d",
		l.sent, got, want, 100*(got-want)/want, l.limited.Load(), sim.RouteCounts()["POST /v1/contacts/list"])
	// Judged on the traffic as it went: a loaded machine sends less than
	// asked, and late, and the bounds follow.
	l.judgeAdmitted(t, "shared limit", got, rps, burst, true)
	if n := sim.RouteCounts()["POST /v1/contacts/list"]; int64(n) != l.ok.Load() {
		t.Errorf("upstream saw %d requests, the fleet admitted %d", n, l.ok.Load())
	}
	if n, decisions := redistest.ScriptRuns(t, r.Client(t)), l.ok.Load()+l.limited.Load(); n != decisions {
		t.Errorf("Redis ran the script %d times for %d decisions, want one each", n, decisions)
	}
	var limited float64
	for i, g := range gws {
		if up := testutil.ToFloat64(g.Metrics.Limits.RateLimitBackendUp.WithLabelValues()); up != 1 {
			t.Errorf("replica %d: backend_up %v, want 1", i, up)
		}
		if fb := testutil.ToFloat64(g.Metrics.Limits.RateLimitFallback.WithLabelValues("svc")); fb != 0 {
			t.Errorf("replica %d: %v fallbacks with Redis up", i, fb)
		}
		limited += testutil.ToFloat64(g.Metrics.Proxy.RateLimited.WithLabelValues("svc"))
	}
	if limited != float64(l.limited.Load()) {
		t.Errorf("faxgate_rate_limited_total sums to %v over the fleet, callers got %d 429s", limited, l.limited.Load())
	}
}

// TestRedisGatewayOutage: Redis dies under traffic; the gateway keeps
// answering (200 or 429, never 5xx) at rps / replicas_hint, counts the
// fallback, and returns to the shared limit by itself once Redis is back.
func TestRedisGatewayOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("timed outage")
	}
	r := redistest.Start(t)
	sim, up := newSim(t)
	// Shared: 30 rps, burst 30. Local share with replicas_hint 3: 10 rps,
	// burst 10 (a burst that absorbs a loaded machine's uneven arrivals).
	const rps, burst, hint = 30.0, 30, 3
	g := gatewaytest.Start(t, gatewaytest.Options{Sim: sim, Upstream: up,
		Config: fmt.Sprintf(rateLimitedFleetConfig, rps, burst, hint), RateLimitRedisAddr: r.Addr,
		RateLimitTimeout: 5 * time.Second})
	gws := []*gatewaytest.Gateway{g}
	backendUp := func() float64 { return testutil.ToFloat64(g.Metrics.Limits.RateLimitBackendUp.WithLabelValues()) }
	fallbacks := func() float64 { return testutil.ToFloat64(g.Metrics.Limits.RateLimitFallback.WithLabelValues("svc")) }

	l := driveAtRate(gws, 2*rps, time.Second, "30")
	l.check(t)
	if backendUp() != 1 || fallbacks() != 0 {
		t.Fatalf("with Redis up: backend_up %v, fallbacks %v; want 1, 0", backendUp(), fallbacks())
	}

	r.Kill()
	const outage = 3 * time.Second
	l = driveAtRate(gws, 2*rps, outage, "10")
	l.check(t)
	decisions := l.ok.Load() + l.limited.Load()
	t.Logf("outage: admitted %d of %d (local limit: %v + burst %d; shared would be %v), fallbacks %v",
		l.ok.Load(), decisions, rps/hint*outage.Seconds(), burst/hint, rps*outage.Seconds()+burst, fallbacks())
	// The local bucket may have served before the outage: not taken as full.
	l.judgeAdmitted(t, "outage (rps / replicas_hint)", float64(l.ok.Load()), rps/hint, burst/hint, false)
	if fb := fallbacks(); fb != float64(decisions) {
		t.Errorf("fallbacks = %v for %d decisions during the outage", fb, decisions)
	}
	if backendUp() != 0 {
		t.Errorf("backend_up = %v during the outage, want 0", backendUp())
	}

	r.Restart(t)
	rc := r.Client(t)
	// Traffic lets the gateway find Redis again.
	eventually.Eventually(t, 5*time.Second, "backend_up at 1 after Redis restarted", func() bool {
		driveAtRate(gws, 10, 200*time.Millisecond, "")
		return backendUp() == 1
	})
	fb, runs := fallbacks(), redistest.ScriptRuns(t, rc)
	l = driveAtRate(gws, 2*rps, 2*time.Second, "30")
	l.check(t)
	decisions = l.ok.Load() + l.limited.Load()
	t.Logf("after recovery: admitted %d of %d in 2s (local's limit would admit about %v)", l.ok.Load(), decisions, rps/hint*2+burst/hint)
	// The shared limit again: its bounds, and every answer's RateLimit-Limit
	// of 30 (checked by driveAtRate), where local's would say 10.
	l.judgeAdmitted(t, "after recovery", float64(l.ok.Load()), rps, burst, false)
	if fallbacks() != fb {
		t.Errorf("%v more fallbacks after recovery", fallbacks()-fb)
	}
	if n := redistest.ScriptRuns(t, rc) - runs; n != decisions {
		t.Errorf("Redis ran the script %d times for %d decisions after recovery, want one each", n, decisions)
	}
	if n := len(g.LogLines("Redis unreachable or too slow: limiting locally at rps / replicas_hint")); n != 1 {
		t.Errorf("%d outage warnings, want 1", n)
	}
}
