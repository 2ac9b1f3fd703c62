//go:build alerting

package alerting

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// soakEnv sets the soak's length (a Go duration); make soak sets 10m, and
// make test-alerting leaves the default, short enough for CI.
const (
	soakEnv             = "FAXGATE_SOAK_DURATION"
	defaultSoakDuration = 2 * time.Minute
	// maxPending is how long a warning or critical alert may stay pending
	// in the soak.
	maxPending = time.Minute
)

// TestSoak runs healthy mixed traffic through both releases with the chart's
// rules at their real for: durations (docs/metrics-and-alerts.md, the
// "Quiet" promise): 1 MiB uploads on faxes.send that the vendor answers after
// 4 to 8 s, a caller meeting its own rate limit, one vendor 429 with
// Retry-After: 1, and one replica restarted. No warning or critical alert may
// fire, or stay pending for more than a minute. Then every query of
// the dashboard runs on that Prometheus (TestSoak/dashboard).
func TestSoak(t *testing.T) {
	d := defaultSoakDuration
	if v := os.Getenv(soakEnv); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d < 30*time.Second {
			t.Fatalf("%s=%q: want a Go duration of 30s or more", soakEnv, v)
		}
	}
	s := startStack(t, stackOptions{})
	waitAllReady(t, s)

	start := time.Now()
	tr := s.drive(t)
	watch := s.watchAlerts(t)

	events := []struct {
		at   time.Duration
		name string
		do   func()
	}{
		{d / 3, "one vendor 429 with Retry-After: 1", func() { s.vendor.throttle.Store(true) }},
		{d / 2, "payments/faxgate-1 restarted", func() { s.restart(t, s.release("payments").replicas[1], tr) }},
	}
	for _, ev := range events {
		time.Sleep(time.Until(start.Add(ev.at))) // paces the soak: each event at its time in the run
		t.Logf("%s: %s", time.Since(start).Round(time.Second), ev.name)
		ev.do()
	}
	time.Sleep(time.Until(start.Add(d))) // paces the soak: healthy traffic for its whole duration
	tr.stop()
	end := time.Now()
	problems, info := watch.stop()

	t.Run("quiet", func(t *testing.T) {
		for _, p := range problems {
			t.Error(p)
		}
		t.Logf("traffic over %s: %s", d, tr.summary())
		t.Logf("info alerts (caller behaviour, allowed):%s", joinLines(info))
		if got := s.vendor.throttled.Load(); got != 1 {
			t.Errorf("the vendor sent %d 429s, want exactly 1", got)
		}
		// The traffic the soak is about did happen.
		for _, c := range []struct {
			key  string
			min  int64
			what string
		}{
			{"sender 200", 2 * int64(d/(10*time.Second)), "uploads answered 200"},
			{"intake 200", int64(d / time.Second), "intake requests answered 200"},
			{"batch 200", int64(d / time.Second), "batch requests answered 200"},
			{"batch 429", 10, "batch requests refused at its rate limit"},
		} {
			if got := tr.count(c.key); got < c.min {
				t.Errorf("%d %s, want at least %d", got, c.what, c.min)
			}
		}
		if n := tr.count("5xx"); n > 0 {
			t.Errorf("%d answers were 5xx: %s", n, tr.summary())
		}
	})

	t.Run("dashboard", func(t *testing.T) {
		checkDashboard(t, s.prom, s.releases, start, end)
	})
}

// waitAllReady waits until Prometheus has every replica up and ready.
func waitAllReady(t *testing.T, s *stack) {
	t.Helper()
	eventually.EventuallyErr(t, 60*time.Second, "every replica up and ready in Prometheus", func() error {
		res, err := s.prom.query(`faxgate_ready == 1`, time.Time{})
		if err != nil {
			return err
		}
		if len(res) != 4 {
			return fmt.Errorf("%d of 4 replicas ready", len(res))
		}
		return nil
	})
}

// restart stops a replica gracefully, as Kubernetes does on a rollout (out
// of the Service first, then SIGTERM), and starts it again.
func (s *stack) restart(t *testing.T, rep *replica, tr *traffic) {
	t.Helper()
	tr.setDown(rep, true)
	time.Sleep(time.Second) // models the chart's preStop delay: endpoints update before the drain
	rep.p.stop()
	rep.p.restart(t)
	waitHTTP(t, rep.p, "http://"+rep.admin+"/readyz", 30*time.Second)
	tr.setDown(rep, false)
}

// traffic is the soak's callers: each a loop at its own pace, over the
// replicas of both releases that are in service.
type traffic struct {
	s    *stack
	quit chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	down   map[*replica]bool
	counts map[string]int64
	next   atomic.Uint64
}

// uploadBody is a faxes.send body of 1 MiB.
var uploadBody = func() []byte {
	pdf := bytes.Repeat([]byte("%PDF-1.7 faxgate soak "), (3<<18)/22+1)[:3<<18] // 768 KiB: 1 MiB in base64
	return []byte(`{"to_number":"+15550100","file_data":"` + base64.StdEncoding.EncodeToString(pdf) + `"}`)
}()

func (s *stack) drive(t *testing.T) *traffic {
	tr := &traffic{s: s, quit: make(chan struct{}), down: map[*replica]bool{}, counts: map[string]int64{}}
	callers := []struct {
		caller, path string
		body         []byte
		every        time.Duration
	}{
		// Per release: intake well under its limits, batch at 2.5 rps
		// against its 2 (it meets its own rate limit: a fifth refused), one
		// upload every 3 s.
		{"intake", "/v1/contacts/list", []byte(`{}`), 200 * time.Millisecond},
		{"batch", "/v1/contacts/list", []byte(`{}`), 400 * time.Millisecond},
		{"sender", "/v1/faxes/send", uploadBody, 3 * time.Second},
	}
	for _, r := range s.releases {
		for _, c := range callers {
			tr.wg.Add(1)
			go func() {
				defer tr.wg.Done()
				tick := time.NewTicker(c.every)
				defer tick.Stop()
				for {
					select {
					case <-tr.quit:
						return
					case <-tick.C:
					}
					// Uploads overlap: each runs on its own.
					tr.wg.Add(1)
					go func() {
						defer tr.wg.Done()
						tr.send(r, c.caller, c.path, c.body)
					}()
				}
			}()
		}
	}
	return tr
}

var client = &http.Client{Timeout: 30 * time.Second}

// send makes one request to a replica of r in service and counts its answer.
func (tr *traffic) send(r *release, caller, path string, body []byte) {
	rep := tr.pick(r)
	req, _ := http.NewRequest(http.MethodPost, rep.url+path, bytes.NewReader(body))
	req.Header.Set("X-Faxgate-Caller", caller)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		var op *net.OpError
		kind := "error"
		if errors.As(err, &op) {
			kind = "net error"
		}
		tr.add(caller+" "+kind, "")
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	code := fmt.Sprint(resp.StatusCode)
	extra := ""
	if resp.StatusCode >= 500 {
		extra = "5xx"
	}
	tr.add(caller+" "+code, extra)
}

func (tr *traffic) pick(r *release) *replica {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for {
		rep := r.replicas[tr.next.Add(1)%uint64(len(r.replicas))]
		if !tr.down[rep] {
			return rep
		}
	}
}

func (tr *traffic) setDown(rep *replica, down bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.down[rep] = down
}

func (tr *traffic) add(keys ...string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, k := range keys {
		if k != "" {
			tr.counts[k]++
		}
	}
}

func (tr *traffic) count(key string) int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.counts[key]
}

func (tr *traffic) summary() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	keys := make([]string, 0, len(tr.counts))
	for k := range tr.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, tr.counts[k])
	}
	return strings.Join(parts, ", ")
}

// stop ends the loops and waits for every request in flight.
func (tr *traffic) stop() {
	close(tr.quit)
	tr.wg.Wait()
}

// alertWatch polls Prometheus's alerts through the soak and keeps each
// problem once: a warning or critical alert firing, or pending for more
// than maxPending. info alerts (caller behaviour, which never pages) are
// only noted.
type alertWatch struct {
	quit chan struct{}
	done chan struct{}

	mu       sync.Mutex
	problems []string
	info     []string // info alerts seen (caller behaviour), for the log
	seen     map[string]bool
}

func (s *stack) watchAlerts(t *testing.T) *alertWatch {
	w := &alertWatch{quit: make(chan struct{}), done: make(chan struct{}), seen: map[string]bool{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				w.check(s.prom)
				return
			case <-tick.C:
				w.check(s.prom)
			}
		}
	}()
	return w
}

func (w *alertWatch) check(p *promAPI) {
	alerts, err := p.alerts()
	if err != nil {
		w.report("alerts API: " + err.Error())
		return
	}
	for _, a := range alerts {
		sev := a.Labels["severity"]
		switch {
		case sev != "warning" && sev != "critical":
			// Caller behaviour (info) is what the soak's callers do:
			// batch above its rate limit pends FaxgateCallerRateLimited.
			w.note(a)
		case a.State == "firing":
			w.report(fmt.Sprintf("%s alert fired while healthy: %v", sev, a))
		case time.Since(a.ActiveAt) > maxPending:
			w.report(fmt.Sprintf("%s alert pending for more than %s while healthy: %v", sev, maxPending, a))
		}
	}
}

// note keeps an info alert once, for the log.
func (w *alertWatch) note(a promAlert) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := a.Labels["alertname"] + a.Labels["job"] + a.Labels["caller"] + a.State
	if !w.seen[key] {
		w.seen[key] = true
		w.info = append(w.info, a.String())
	}
}

func (w *alertWatch) report(p string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Once per alert and state, not once per poll.
	key := p
	if i := strings.LastIndex(p, " since "); i > 0 {
		key = p[:i]
	}
	if !w.seen[key] {
		w.seen[key] = true
		w.problems = append(w.problems, time.Now().Format(time.TimeOnly)+" "+p)
	}
}

// stop takes a last look and returns every problem seen, and the info
// alerts.
func (w *alertWatch) stop() (problems, info []string) {
	close(w.quit)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.problems, w.info
}
