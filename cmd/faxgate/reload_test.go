package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// reloadConfig is a serve config whose callers section the tests rewrite.
func reloadConfig(baseURL, keyFile, allow, extra string) string {
	return fmt.Sprintf(`server:
  listen: "127.0.0.1:0"
  shutdown_timeout: 5s
admin:
  listen: "127.0.0.1:0"
upstream:
  base_url: %q
  api_key_file: %q
callers:
  list:
    - name: local
      cidrs: ["127.0.0.0/8"]
      allow: [%s]
      rate_limit: { rps: 1000, burst: 1000 }
%s`, baseURL, keyFile, allow, extra)
}

type reloadFixture struct {
	path, keyFile, baseURL string
	g                      *gateway
	hup                    chan struct{}
	// clock drives the gateway: the reloader polls the file on it.
	clock *clocktest.Fake
}

func startReloadable(t *testing.T, every time.Duration) *reloadFixture {
	t.Helper()
	return startReloadableWith(t, every, nil, func(f *reloadFixture) string {
		return reloadConfig(f.baseURL, f.keyFile, `"contacts.*"`, "")
	})
}

// startReloadableWith serves the config that first returns, in front of a
// faxsim wrapped by wrap (when set).
func startReloadableWith(t *testing.T, every time.Duration, wrap func(http.Handler) http.Handler, first func(*reloadFixture) string) *reloadFixture {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: testKey})
	var h http.Handler = sim
	if wrap != nil {
		h = wrap(sim)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	dir := t.TempDir()
	f := &reloadFixture{path: filepath.Join(dir, "faxgate.yaml"), keyFile: filepath.Join(dir, "key"),
		baseURL: srv.URL, hup: make(chan struct{}, 1), clock: clocktest.New(time.Now())}
	if err := os.WriteFile(f.keyFile, []byte(testKey), 0o600); err != nil {
		t.Fatal(err)
	}
	f.writeRaw(t, first(f))
	ctx, cancel := context.WithCancel(context.Background())
	g := &gateway{stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	addrs := make(chan [2]string, 1)
	e := env{stdout: io.Discard, stderr: g.stderr, getenv: mapEnv(nil), hup: f.hup, reloadEvery: every,
		clock: f.clock, ready: func(p, a string) { addrs <- [2]string{p, a} }}
	go func() { g.done <- run(ctx, []string{"serve", "--config", f.path}, e) }()
	t.Cleanup(func() { cancel(); <-g.done })
	select {
	case a := <-addrs:
		g.proxyURL, g.adminURL = "http://"+a[0], "http://"+a[1]
	case <-time.After(10 * time.Second):
		t.Fatalf("not listening\n%s", g.stderr.String())
	}
	f.g = g
	g.waitReady(t)
	return f
}

// idle waits until the gateway's loops sleep on the fake clock: token
// renewal, key-file watcher and config reloader, one timer each.
func (f *reloadFixture) idle(t *testing.T) {
	t.Helper()
	if !f.clock.WaitPending(3, 5*time.Second) {
		t.Fatalf("%d timers pending, want the 3 background loops asleep", f.clock.Pending())
	}
}

// poll lets the reloader check the file once: one polling interval passes.
func (f *reloadFixture) poll(t *testing.T, every time.Duration) {
	t.Helper()
	f.idle(t)
	f.clock.Advance(every)
}

func (f *reloadFixture) write(t *testing.T, allow, extra string) {
	t.Helper()
	f.writeRaw(t, reloadConfig(f.baseURL, f.keyFile, allow, extra))
}

func (f *reloadFixture) writeRaw(t *testing.T, yaml string) {
	t.Helper()
	// Write and rename, as config management tools do, so no half file is read.
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		t.Fatal(err)
	}
}

func (f *reloadFixture) templates(t *testing.T) int {
	t.Helper()
	code, _ := get(t, f.g.proxyURL+"/v1/esign_templates", nil)
	return code
}

func (f *reloadFixture) metric(t *testing.T, name string) string {
	t.Helper()
	_, body := get(t, f.g.adminURL+"/metrics", nil)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return strings.TrimPrefix(l, name+" ")
		}
	}
	return ""
}

func TestReloadOnFileChange(t *testing.T) {
	f := startReloadable(t, time.Second)
	if code := f.templates(t); code != http.StatusForbidden {
		t.Fatalf("before reload: %d, want 403", code)
	}
	f.write(t, `"*"`, "")
	f.poll(t, time.Second)
	eventually.Eventually(t, 5*time.Second, "the new allow list applies", func() bool { return f.templates(t) == http.StatusOK })
	// The rules are swapped before the reload is counted: the count may
	// trail the first request the new rules answer by a moment.
	eventually.Eventually(t, 5*time.Second, "the reload is counted", func() bool {
		return f.metric(t, `faxgate_config_reload_total{result="ok"}`) == "1"
	})
	if got := f.metric(t, "faxgate_config_last_reload_success_timestamp_seconds"); got == "" || got == "0" {
		t.Fatalf("last reload timestamp = %q", got)
	}
}

func TestReloadKeepsServingWhenTheNewFileIsInvalid(t *testing.T) {
	f := startReloadable(t, time.Second)
	if err := os.WriteFile(f.path, []byte("callers:\n  list:\n    - name: BAD NAME\n      cidrs: [\"10.0.0/8\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.poll(t, time.Second)
	eventually.Eventually(t, 5*time.Second, "the rejection is counted", func() bool {
		return f.metric(t, `faxgate_config_reload_total{result="error"}`) == "1"
	})
	if !strings.Contains(f.g.stderr.String(), "config reload rejected") || !strings.Contains(f.g.stderr.String(), `invalid CIDR \"10.0.0/8\"`) {
		t.Fatalf("no log line naming the problems:\n%s", f.g.stderr.String())
	}
	code, body, err := postJSON(newClient(t), f.g.proxyURL+"/v1/contacts/list", `{}`)
	if err != nil || code != http.StatusOK {
		t.Fatalf("old config stopped serving: %d %s %v", code, body, err)
	}
	if code := f.templates(t); code != http.StatusForbidden {
		t.Fatalf("old policy not in force: %d", code)
	}
}

func TestReloadOnSIGHUP(t *testing.T) {
	f := startReloadable(t, time.Hour) // no polling: only the signal reloads
	f.write(t, `"*"`, "")
	f.idle(t) // the reloader sleeps through its hour on the fake clock
	if code := f.templates(t); code != http.StatusForbidden {
		t.Fatalf("applied without a signal: %d", code)
	}
	f.hup <- struct{}{}
	eventually.Eventually(t, 5*time.Second, "SIGHUP applies the file", func() bool { return f.templates(t) == http.StatusOK })
}

func TestReloadReportsSettingsThatNeedARestart(t *testing.T) {
	f := startReloadable(t, time.Hour)
	f.write(t, `"*"`, "token:\n  refresh_before: 2h\nlog:\n  format: console\n")
	f.hup <- struct{}{}
	eventually.Eventually(t, 5*time.Second, "callers applied", func() bool { return f.templates(t) == http.StatusOK })
	eventually.Eventually(t, 5*time.Second, "restart gauge", func() bool { return f.metric(t, "faxgate_config_restart_required") == "1" })
	log := f.g.stderr.String()
	if !strings.Contains(log, `"restart_required":["token.refresh_before","log.format"]`) {
		t.Fatalf("restart-required settings not reported:\n%s", log)
	}
}

// generationConfig is one generation of TestReloadIsAtomicUnderTraffic.
// Each generation changes four parts of the compiled rules at once, each
// visible in the same response: the caller's name (Identifier), the allow
// list held under that name (Policy), the caller's burst, reported as
// RateLimit-Limit (Limiter), and callers.identity_header, which the gateway
// strips before forwarding (what the upstream saw). Requests carry both
// generations' identity headers, and the upstream reports which arrived.
//
// A request decided by parts of two generations cannot pass as either: the
// old name is unknown to the new allow list (403, or the default limit's
// burst 7 from the new limiter), the other generation's burst shows in
// RateLimit-Limit, or the wrong header reaches the upstream.
func generationConfig(baseURL, keyFile string, gen int) string {
	names := [2]string{"alpha", "beta"}
	return fmt.Sprintf(`server:
  listen: "127.0.0.1:0"
  shutdown_timeout: 5s
admin:
  listen: "127.0.0.1:0"
upstream:
  base_url: %q
  api_key_file: %q
rate_limit:
  default: { rps: 1, burst: 7 }
callers:
  identity_header: X-Gen-%d
  list:
    - name: %s
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
      rate_limit: { rps: 1000000, burst: %d }
`, baseURL, keyFile, gen, names[gen], 100000+gen)
}

// TestReloadIsAtomicUnderTraffic: while the config flips between two
// generations under traffic, every answer is wholly one generation's, both
// generations answer, and every reload was applied.
func TestReloadIsAtomicUnderTraffic(t *testing.T) {
	// The upstream reports which identity headers reached it.
	saw := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Saw", fmt.Sprintf("0=%v 1=%v", r.Header.Get("X-Gen-0") != "", r.Header.Get("X-Gen-1") != ""))
			next.ServeHTTP(w, r)
		})
	}
	f := startReloadableWith(t, time.Hour, saw, func(f *reloadFixture) string { return generationConfig(f.baseURL, f.keyFile, 0) })
	// What each generation answers: 200, its own burst, and the upstream
	// seeing only the other generation's identity header.
	want := map[string]int{
		"200 limit=100000 saw[0=false 1=true]": 0,
		"200 limit=100001 saw[0=true 1=false]": 1,
	}

	c := newClient(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int]int{}    // generation -> answers
	torn := map[string]int{} // answers matching no generation -> count
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, f.g.proxyURL+"/v1/esign_templates", nil)
				req.Header.Set("X-Gen-0", "x")
				req.Header.Set("X-Gen-1", "x")
				resp, err := c.Do(req)
				answer := ""
				if err != nil {
					answer = "error: " + err.Error()
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					answer = fmt.Sprintf("%d limit=%s saw[%s]", resp.StatusCode, resp.Header.Get("RateLimit-Limit"), resp.Header.Get("X-Saw"))
				}
				mu.Lock()
				if gen, ok := want[answer]; ok {
					seen[gen]++
				} else {
					torn[answer]++
				}
				mu.Unlock()
			}
		}()
	}
	const reloads = 20
	// Each reload is followed by an answer of its generation before the
	// next, so that every generation serves traffic.
	answered := func(gen int) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[gen]
	}
	for i := range reloads {
		gen := (i + 1) % 2
		before := answered(gen)
		f.writeRaw(t, generationConfig(f.baseURL, f.keyFile, gen))
		f.hup <- struct{}{}
		eventually.Eventually(t, 5*time.Second, fmt.Sprintf("an answer of generation %d after reload %d", gen, i+1),
			func() bool { return answered(gen) > before })
	}
	eventually.Eventually(t, 5*time.Second, "every reload is applied", func() bool {
		return f.metric(t, `faxgate_config_reload_total{result="ok"}`) == fmt.Sprint(reloads)
	})
	close(stop)
	wg.Wait()
	if len(torn) > 0 {
		t.Fatalf("answers matching neither generation (torn reads or failures): %v; per generation: %v", torn, seen)
	}
	if seen[0] == 0 || seen[1] == 0 {
		t.Fatalf("answers per generation %v: both generations must have answered", seen)
	}
	if got := f.metric(t, `faxgate_config_reload_total{result="error"}`); got != "" && got != "0" {
		t.Fatalf("reload errors = %s, want none", got)
	}
	t.Logf("answers per generation: %v", seen)
}
