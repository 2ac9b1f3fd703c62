package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"
	"github.com/faxgate/faxgate/policy"
)

const testKey = "sk_test_gateway-K3y-never-logged-0123456789"

// syncBuffer collects log output from the gateway's goroutines.
type syncBuffer = syncbuf.Buffer

func testConfigYAML(baseURL, allow string) string {
	return `upstream:
  base_url: "` + baseURL + `"
  api_key_env: FG_KEY
server:
  listen: "127.0.0.1:0"
  shutdown_timeout: 2s
admin:
  listen: "127.0.0.1:0"
callers:
  list:
    - name: local
      cidrs: ["127.0.0.0/8"]
      allow: [` + allow + `]
`
}

func testGetenv(k string) (string, bool) {
	if k == "FG_KEY" {
		return testKey, true
	}
	return "", false
}

func newTestGateway(t *testing.T, baseURL string) (*Gateway, *syncBuffer, *prometheus.Registry) {
	t.Helper()
	cfg, err := config.Parse([]byte(testConfigYAML(baseURL, `"contacts.*"`)), testGetenv)
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	logs, err := NewLogs(cfg.Log, buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	g, err := New(cfg, Deps{Logs: logs, Registry: reg, Getenv: testGetenv, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g, buf, reg
}

// TestNewStartsNothing: New only assembles. No token call reaches the
// upstream before Run, so a gateway that fails to start never used its key.
func TestNewStartsNothing(t *testing.T) {
	sim := faxsim.New(faxsim.Options{APIKey: testKey})
	up := httptest.NewServer(sim)
	defer up.Close()
	g, _, _ := newTestGateway(t, up.URL)
	eventually.Never(t, 200*time.Millisecond, "a token call before Run", func() bool { return sim.AuthCalls() != 0 })
	if ok, _ := g.Tokens.Ready(); ok {
		t.Fatalf("ready without a token")
	}
}

func TestNewRefusesMissingSecrets(t *testing.T) {
	cases := []struct {
		name, extra, want string
	}{
		{"api key env", "", `upstream.api_key_env: environment variable "FG_KEY" is not set`},
		{"redis password env", "redis:\n  addrs: [\"127.0.0.1:1\"]\n  password_env: FG_REDIS_PW\nrate_limit:\n  backend: redis\n",
			`redis.password_env: environment variable "FG_REDIS_PW" is not set`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			getenv := testGetenv
			if tc.extra == "" {
				getenv = func(string) (string, bool) { return "", false }
			}
			cfg, err := config.Parse([]byte(testConfigYAML("http://127.0.0.1:1", `"*"`)+tc.extra), testGetenv)
			if err != nil {
				t.Fatal(err)
			}
			_, err = New(cfg, Deps{Registry: prometheus.NewRegistry(), Getenv: getenv})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestAuditSurvivesErrorLevel: with log.level error the access logger is
// quiet, but the audit logger still writes at info, to the same sink, and a
// reload that changes the level does not move it.
func TestAuditSurvivesErrorLevel(t *testing.T) {
	var buf syncBuffer
	logs, err := NewLogs(config.Log{Level: "error", Format: "json"}, &buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	logs.Logger.Info("access")
	logs.Audit.Info("audit")
	if len(buf.Lines("access")) != 0 {
		t.Errorf("info line written at log.level error")
	}
	if len(buf.Lines("audit")) != 1 {
		t.Fatalf("audit line lost at log.level error:\n%s", buf.String())
	}
	logs.Level.SetLevel(zapcore.FatalLevel)
	logs.Audit.Info("audit")
	if len(buf.Lines("audit")) != 2 {
		t.Errorf("audit line lost after the level was raised")
	}
	if l := buf.Lines("audit")[0]; l["level"] != "info" || l["ts"] == nil {
		t.Errorf("audit line %v: want the shared encoder (level, ts)", l)
	}
}

// TestReloadSurvivesACompilePanic: a panic while compiling a reloaded file
// is logged with its stack, counted as a failed reload, and leaves the
// running rules in force; the next reload works.
func TestReloadSurvivesACompilePanic(t *testing.T) {
	g, logs, _ := newTestGateway(t, "http://127.0.0.1:1")
	path := filepath.Join(t.TempDir(), "faxgate.yaml")
	if err := os.WriteFile(path, []byte(testConfigYAML("http://127.0.0.1:1", `"*"`)), 0o600); err != nil {
		t.Fatal(err)
	}
	rl := newReloader(g, path)
	real := rl.compile
	panics := 1
	rl.compile = func(c *config.Config, prev *policy.Rules) (*policy.Rules, error) {
		if panics > 0 {
			panics--
			var r *policy.Rules
			_ = r.Table // nil dereference: a runtime error, like a real bug
		}
		return real(c, prev)
	}
	before := g.Handler.Rules()

	rl.reload("signal")
	if g.Handler.Rules() != before {
		t.Fatalf("rules changed by a reload that panicked")
	}
	if got := testutil.ToFloat64(g.Metrics.ConfigReload.WithLabelValues("error")); got != 1 {
		t.Errorf("reload errors = %v, want 1", got)
	}
	if got := testutil.ToFloat64(g.Metrics.ConfigLastReloadOK); got != 0 {
		t.Errorf("faxgate_config_last_reload_successful = %v after a failed reload, want 0", got)
	}
	ls := logs.Lines(background.Msg)
	if len(ls) != 1 || ls[0]["loop"] != "config_reload" || !strings.Contains(ls[0]["panic"].(string), "nil pointer") ||
		!strings.Contains(ls[0]["stack"].(string), "TestReloadSurvivesACompilePanic") {
		t.Fatalf("panic lines %v", ls)
	}
	if strings.Contains(logs.String(), testKey) {
		t.Errorf("logs hold the API key")
	}

	rl.reload("signal")
	if g.Handler.Rules() == before {
		t.Fatalf("the reload after the panic did not apply")
	}
	if got := testutil.ToFloat64(g.Metrics.ConfigReload.WithLabelValues("ok")); got != 1 {
		t.Errorf("reloads ok = %v, want 1", got)
	}
	if got := testutil.ToFloat64(g.Metrics.ConfigLastReloadOK); got != 1 {
		t.Errorf("faxgate_config_last_reload_successful = %v after a good reload, want 1", got)
	}
}

// TestRunServesAndDrains: Run binds both listeners, the admin listener
// answers, and ending the context drains and returns nil.
func TestRunServesAndDrains(t *testing.T) {
	sim := faxsim.New(faxsim.Options{APIKey: testKey})
	up := httptest.NewServer(sim)
	defer up.Close()
	g, logs, _ := newTestGateway(t, up.URL)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, RunOptions{Ready: func(p, a string) { addrs <- [2]string{p, a} }}) }()
	a := <-addrs
	eventually.EventuallyErr(t, 5*time.Second, "/readyz 200", func() error {
		resp, err := http.Get("http://" + a[1] + "/readyz")
		if err != nil {
			return fmt.Errorf("%v\n%s", err, logs.String())
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%d\n%s", resp.StatusCode, logs.String())
		}
		return nil
	})
	if got := readyGauge(t, g); got != 1 {
		t.Errorf("faxgate_ready = %v while /readyz is 200, want 1", got)
	}
	resp, err := http.Post("http://"+a[0]+"/v1/contacts/list", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("proxy answered %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after a clean drain", err)
	}
	if got := readyGauge(t, g); got != 0 {
		t.Errorf("faxgate_ready = %v after the drain, want 0", got)
	}
	if len(logs.Lines("stopped")) != 1 {
		t.Errorf("no stopped line:\n%s", logs.String())
	}
}

// readyGauge is faxgate_ready as a scrape of g's registry reads it.
func readyGauge(t *testing.T, g *Gateway) float64 {
	t.Helper()
	return readGauge(t, g, "faxgate_ready")
}

// panickyClock is a fake clock whose first NewTimer call panics.
type panickyClock struct {
	*clocktest.Fake
	armed atomic.Bool
}

func (c *panickyClock) NewTimer(d time.Duration) clock.Timer {
	if c.armed.CompareAndSwap(true, false) {
		panic("injected clock failure")
	}
	return c.Fake.NewTimer(d)
}

// TestReloaderLoopSurvivesAPanic: a panic in the reloader's loop itself
// (its clock) is logged, and one interval later the loop polls again and
// applies a changed file.
func TestReloaderLoopSurvivesAPanic(t *testing.T) {
	g, logs, _ := newTestGateway(t, "http://127.0.0.1:1")
	path := filepath.Join(t.TempDir(), "faxgate.yaml")
	if err := os.WriteFile(path, []byte(testConfigYAML("http://127.0.0.1:1", `"contacts.*"`)), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := &panickyClock{Fake: clocktest.New(time.Now())}
	clock.armed.Store(true)
	rl := newReloader(g, path)
	rl.clock = clock
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rl.run(ctx, nil, time.Second) }()
	defer func() { cancel(); <-done }()

	tick := func() {
		t.Helper()
		if !clock.WaitPending(1, 5*time.Second) {
			t.Fatal("the reloader is not waiting")
		}
		clock.Advance(time.Second)
	}
	tick() // the pause after the panic; the loop restarts
	before := g.Handler.Rules()
	if err := os.WriteFile(path, []byte(testConfigYAML("http://127.0.0.1:1", `"*"`)), 0o600); err != nil {
		t.Fatal(err)
	}
	tick()
	eventually.EventuallyErr(t, 5*time.Second, "the changed file applied after the panic", func() error {
		if g.Handler.Rules() == before {
			return fmt.Errorf("logs:\n%s", logs.String())
		}
		return nil
	})
	ls := logs.Lines(background.Msg)
	if len(ls) != 1 || ls[0]["loop"] != "config_reload" || ls[0]["then"] != "restarting the loop" {
		t.Fatalf("panic lines %v", ls)
	}
}
