package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
}

func startReloadable(t *testing.T, every time.Duration) *reloadFixture {
	t.Helper()
	up := startUpstream(t, testKey)
	dir := t.TempDir()
	f := &reloadFixture{path: filepath.Join(dir, "faxgate.yaml"), keyFile: filepath.Join(dir, "key"),
		baseURL: up.srv.URL, hup: make(chan struct{}, 1)}
	if err := os.WriteFile(f.keyFile, []byte(testKey), 0o600); err != nil {
		t.Fatal(err)
	}
	f.write(t, `"contacts.*"`, "")
	ctx, cancel := context.WithCancel(context.Background())
	g := &gateway{stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	addrs := make(chan [2]string, 1)
	e := env{stdout: io.Discard, stderr: g.stderr, getenv: mapEnv(nil), hup: f.hup, reloadEvery: every,
		ready: func(p, a string) { addrs <- [2]string{p, a} }}
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

func (f *reloadFixture) write(t *testing.T, allow, extra string) {
	t.Helper()
	// Write and rename, as config management tools do, so no half file is read.
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(reloadConfig(f.baseURL, f.keyFile, allow, extra)), 0o600); err != nil {
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

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func TestReloadOnFileChange(t *testing.T) {
	f := startReloadable(t, 20*time.Millisecond)
	if code := f.templates(t); code != http.StatusForbidden {
		t.Fatalf("before reload: %d, want 403", code)
	}
	f.write(t, `"*"`, "")
	eventually(t, "the new allow list applies", func() bool { return f.templates(t) == http.StatusOK })
	if got := f.metric(t, `faxgate_config_reload_total{result="ok"}`); got != "1" {
		t.Fatalf("reload ok = %q, want 1", got)
	}
	if got := f.metric(t, "faxgate_config_last_reload_success_timestamp_seconds"); got == "" || got == "0" {
		t.Fatalf("last reload timestamp = %q", got)
	}
}

func TestReloadKeepsServingWhenTheNewFileIsInvalid(t *testing.T) {
	f := startReloadable(t, 20*time.Millisecond)
	if err := os.WriteFile(f.path, []byte("callers:\n  list:\n    - name: BAD NAME\n      cidrs: [\"10.0.0/8\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rejection is counted", func() bool {
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
	time.Sleep(50 * time.Millisecond)
	if code := f.templates(t); code != http.StatusForbidden {
		t.Fatalf("applied without a signal: %d", code)
	}
	f.hup <- struct{}{}
	eventually(t, "SIGHUP applies the file", func() bool { return f.templates(t) == http.StatusOK })
}

func TestReloadReportsSettingsThatNeedARestart(t *testing.T) {
	f := startReloadable(t, time.Hour)
	f.write(t, `"*"`, "token:\n  refresh_before: 2h\nlog:\n  format: console\n")
	f.hup <- struct{}{}
	eventually(t, "callers applied", func() bool { return f.templates(t) == http.StatusOK })
	eventually(t, "restart gauge", func() bool { return f.metric(t, "faxgate_config_restart_required") == "1" })
	log := f.g.stderr.String()
	if !strings.Contains(log, `"restart_required":["token.refresh_before","log.format"]`) {
		t.Fatalf("restart-required settings not reported:\n%s", log)
	}
}

func TestReloadIsAtomicUnderTraffic(t *testing.T) {
	f := startReloadable(t, time.Hour)
	c := newClient(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[int]int{}
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
				resp, err := c.Get(f.g.proxyURL + "/v1/esign_templates")
				if err != nil {
					mu.Lock()
					bad[-1]++
					mu.Unlock()
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 403 {
					mu.Lock()
					bad[resp.StatusCode]++
					mu.Unlock()
				}
			}
		}()
	}
	for i := range 20 {
		allow := `"contacts.*"`
		if i%2 == 0 {
			allow = `"*"`
		}
		f.write(t, allow, "")
		f.hup <- struct{}{}
		time.Sleep(15 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("answers other than the old or the new decision during reloads: %v", bad)
	}
}
