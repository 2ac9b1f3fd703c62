package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// Waiting instead of refusing on one gateway
// (docs/upstream-budget.md#waiting-instead-of-refusing): SIGTERM, 1,000
// waiters, callers that leave.

// TestWaitersAnsweredOnShutdown: SIGTERM with requests waiting: every one
// gets its answer within half of shutdown_timeout, and the drain ends
// clean. GET /budget shows them while they wait.
func TestWaitersAnsweredOnShutdown(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: budgetCallers + `
server:
  shutdown_timeout: 4s
upstream_budget:
  max_wait: 4s
  limits:
    - { name: tenant, scope: tenant, requests: 6, per: 1m }
`})
	for range 2 {
		if a := call(t, g, "batch"); a.status != 200 {
			t.Fatalf("filling the window: %+v", a)
		}
	}
	// The window frees in a minute, beyond max_wait: these are refused at
	// once. A hold of 3 s is within it: these wait.
	if a := call(t, g, "batch"); a.status != 429 || a.code != "upstream_budget_exhausted" {
		t.Fatalf("beyond max_wait: %+v", a)
	}
	g.Gateway.Holds.Hold("contacts.details", 3*time.Second)
	type res struct {
		status int
		took   time.Duration
	}
	out := make(chan res, 5)
	for range 5 {
		go func() {
			start := time.Now()
			resp, _ := g.Do(t, "POST", "/v1/contacts/details", `{"contact_id":"c_1"}`)
			out <- res{resp.StatusCode, time.Since(start)}
		}()
	}
	waitGauge(t, g, 5)
	resp, err := http.Get(g.AdminURL + "/budget")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Waiting struct {
			Total   int            `json:"total"`
			Callers map[string]int `json:"callers"`
			Queues  []struct {
				Kind, Route string
				Waiting     int
			} `json:"queues"`
		} `json:"waiting"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Waiting.Total != 5 || st.Waiting.Callers["batch"] != 5 || len(st.Waiting.Queues) != 1 ||
		st.Waiting.Queues[0].Kind != "hold" || st.Waiting.Queues[0].Route != "contacts.details" {
		t.Errorf("GET /budget waiting: %+v (%v)", st.Waiting, err)
	}
	start := time.Now()
	if err := g.Shutdown(); err != nil {
		t.Errorf("drain: %v", err)
	}
	for range 5 {
		select {
		case r := <-out:
			// The hold ends at 3 s, after half the drain (2 s): refused at once.
			if r.status != 429 {
				t.Errorf("a waiter got %d on shutdown, want its 429", r.status)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a waiter had no answer 3 s into the drain")
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the drain took %v, want the waiters answered at once", took)
	}
}

// TestThousandWaitersCostNoCPU: 1,000 requests wait out a hold on one
// replica. While they wait the process burns no CPU to speak of (no
// polling: one timer for the hold's queue), the memory they hold is
// bounded per waiter, and when the hold ends all of them are answered 200.
// The numbers are logged (docs/upstream-budget.md cites them).
//
// The hold outlasts however long a loaded machine takes to get a thousand
// requests waiting; the gateway's clock (real, timers and all, so that a
// poll would cost what it costs) jumps to its end once the measurement is
// done.
func TestThousandWaitersCostNoCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 connections")
	}
	const n, hold = 1000, 80 * time.Second
	clk := newJumpClock()
	// A loaded machine may take seconds to forward a thousand requests let
	// go at once: upstream.timeout is not what is measured here.
	g := gatewaytest.Start(t, gatewaytest.Options{Clock: clk, UpstreamTimeout: time.Minute, Config: budgetCallers + `
server:
  shutdown_timeout: 2m
upstream_budget:
  max_wait: 90s
`})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}, Timeout: hold}
	t.Cleanup(client.CloseIdleConnections)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	g.Gateway.Holds.Hold("contacts.list", hold)
	codes := make(chan int, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("POST", g.URL+"/v1/contacts/list", strings.NewReader(`{}`))
			resp, err := client.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	eventually.EventuallyErr(t, hold/2, fmt.Sprintf("%d requests waiting", n), func() error {
		if w := testutil.ToFloat64(g.Metrics.Limits.BudgetWaiting); w != n {
			return fmt.Errorf("%v waiting", w)
		}
		return nil
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	cpu0 := cpuTime(t)
	const span = 2 * time.Second
	// The window measured, and a claim of its own: all of them keep waiting.
	eventually.Never(t, span, "an answer while the hold stands", func() bool { return len(codes) > 0 })
	cpu := cpuTime(t) - cpu0
	perWaiter := (int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)) / n
	t.Logf("%d waiting: process CPU %v over %v of waiting (%.1f%% of one core); heap+stacks %d bytes per waiting "+
		"request, client side and connections included; %d goroutines more",
		n, cpu, span, 100*cpu.Seconds()/span.Seconds(), perWaiter, runtime.NumGoroutine()-goroutines)
	if cpu > span/10 {
		t.Errorf("the process used %v of CPU in %v while %d requests waited, want under a tenth of a core", cpu, span, n)
	}
	// Both ends of an HTTP/1.1 connection in this one process: buffers and
	// five goroutines per request. The waiting itself is under 1 KiB of it
	// (policy/limit's TestWaitThousandWaitersCostNoCPU).
	if perWaiter > 128<<10 {
		t.Errorf("%d bytes per waiting request, want under 128 KiB", perWaiter)
	}
	clk.Jump(hold)
	for range n {
		if c := <-codes; c != 200 {
			t.Fatalf("a waiter got %d after the hold", c)
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestWaiterThatLeavesIsRemovedAtOnce: a caller that closes its connection
// while it waits leaves the queue at once; it never reaches the vendor and
// counts in no window.
func TestWaiterThatLeavesIsRemovedAtOnce(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: budgetCallers + `
upstream_budget:
  max_wait: 5s
  limits:
    - { name: tenant, scope: tenant, requests: 60, per: 1m }
`})
	g.Gateway.Holds.Hold("contacts.list", 2*time.Second)
	c, err := g.Dial(nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	body := `{}`
	if _, err := io.WriteString(c, "POST /v1/contacts/list HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	waitGauge(t, g, 1)
	c.Close()
	left := time.Now()
	waitGauge(t, g, 0)
	if d := time.Since(left); d > 500*time.Millisecond {
		t.Errorf("the waiter left %v after its caller", d)
	}
	// Its request is over: nothing can be sent for it, when the hold ends
	// or later.
	waitInflight(t, g, 0)
	if n := g.Sim.RouteCounts()["POST /v1/contacts/list"]; n != 0 {
		t.Errorf("%d requests reached the vendor", n)
	}
	resp, err := http.Get(g.AdminURL + "/budget")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Limits []struct {
			Windows []struct{ Used int } `json:"windows"`
		} `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Limits) != 1 || len(st.Limits[0].Windows) != 1 ||
		st.Limits[0].Windows[0].Used != 0 {
		t.Errorf("GET /budget after the departure: %+v (%v), want nothing counted", st, err)
	}
}

// waitGauge waits for faxgate_upstream_budget_waiting to be want.
func waitGauge(t *testing.T, g *gatewaytest.Gateway, want float64) {
	t.Helper()
	waitValue(t, g.Metrics.Limits.BudgetWaiting, "faxgate_upstream_budget_waiting", want)
}

// waitInflight waits for faxgate_inflight_requests to be want: at 0 every
// request has been answered, or has ended with its caller gone.
func waitInflight(t *testing.T, g *gatewaytest.Gateway, want float64) {
	t.Helper()
	waitValue(t, g.Metrics.Proxy.Inflight, "faxgate_inflight_requests", want)
}

func waitValue(t *testing.T, c prometheus.Collector, name string, want float64) {
	t.Helper()
	eventually.EventuallyErr(t, 5*time.Second, fmt.Sprintf("%s at %v", name, want), func() error {
		if got := testutil.ToFloat64(c); got != want {
			return fmt.Errorf("it is %v", got)
		}
		return nil
	})
}

// TestWaiterWithUnreadBodyThatLeavesIsNotCounted: a body over 32 KiB is
// still unread while its request waits, so net/http cannot see the
// caller's close; the waiter asks the connection at its turn and leaves
// then, uncounted and never forwarded (Linux). The body here fits in the
// socket's receive buffer, so the caller's FIN arrives behind it.
func TestWaiterWithUnreadBodyThatLeavesIsNotCounted(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the TCP state is read with Linux's TCP_INFO")
	}
	g := gatewaytest.Start(t, gatewaytest.Options{Config: budgetCallers + `
upstream_budget:
  max_wait: 5s
  limits:
    - { name: tenant, scope: tenant, requests: 60, per: 1m }
`})
	g.Gateway.Holds.Hold("contacts.create", 2*time.Second)
	c, err := g.Dial(nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"first_name":"` + strings.Repeat("a", 64<<10) + `"}`
	if _, err := io.WriteString(c, "POST /v1/contacts/create HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	waitGauge(t, g, 1)
	c.Close()
	start := time.Now()
	waitGauge(t, g, 0)
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("the waiter left %v after its caller, want at its turn (the hold's end)", d)
	}
	waitInflight(t, g, 0)
	if n := g.Sim.RouteCounts()["POST /v1/contacts/create"]; n != 0 {
		t.Errorf("%d requests reached the vendor", n)
	}
	if used := tenantUsed(t, g); used != 0 {
		t.Errorf("the tenant window counted %d, want nothing of a caller that left", used)
	}
}

// tenantUsed is GET /budget's use of the one tenant window.
func tenantUsed(t *testing.T, g *gatewaytest.Gateway) int {
	t.Helper()
	resp, err := http.Get(g.AdminURL + "/budget")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Limits []struct {
			Windows []struct{ Used int } `json:"windows"`
		} `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Limits) != 1 || len(st.Limits[0].Windows) != 1 {
		t.Fatalf("GET /budget: %+v (%v)", st, err)
	}
	return st.Limits[0].Windows[0].Used
}
