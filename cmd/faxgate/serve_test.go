package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// TestServeEndToEnd runs `faxgate serve` in front of a faxsim and checks the
// proxy listener and the admin endpoints of docs/metrics-and-alerts.md.
func TestServeEndToEnd(t *testing.T) {
	up := startUpstream(t, testKey)
	g := startServe(t, writeConfig(t, serveOpts{baseURL: up.srv.URL}), nil)
	g.waitReady(t)
	c := newClient(t)

	t.Run("proxy forwards with the token", func(t *testing.T) {
		code, body, err := postJSON(c, g.proxyURL+"/v1/contacts/list", `{}`)
		if err != nil {
			t.Fatal(err)
		}
		if st, msg, _ := gatewaytest.Envelope(t, body); code != http.StatusOK || st != 1 {
			t.Fatalf("contacts.list = %d status %d (%s), want 200 status 1", code, st, msg)
		}
		recs := up.sim.Requests()
		last := recs[len(recs)-1]
		if last.Path != "/v1/contacts/list" || !strings.HasPrefix(last.Header.Get("Authorization"), "Bearer ") {
			t.Errorf("upstream got %s %s with Authorization %q, want the contacts.list with a Bearer token",
				last.Method, last.Path, last.Header.Get("Authorization"))
		}
	})

	t.Run("healthz", func(t *testing.T) {
		if code, body := get(t, g.adminURL+"/healthz", nil); code != http.StatusOK {
			t.Errorf("/healthz = %d %s, want 200", code, body)
		}
	})

	t.Run("readyz", func(t *testing.T) {
		code, body := get(t, g.adminURL+"/readyz", nil)
		var r struct {
			Ready *bool `json:"ready"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || code != http.StatusOK || r.Ready == nil || !*r.Ready {
			t.Errorf("/readyz = %d %s, want 200 {\"ready\":true}", code, body)
		}
	})

	t.Run("metrics text", func(t *testing.T) {
		code, body := get(t, g.adminURL+"/metrics", nil)
		if code != http.StatusOK {
			t.Fatalf("/metrics = %d", code)
		}
		for _, want := range []string{
			`faxgate_requests_total{caller="local",code="200",method="POST",route="contacts.list"} 1`,
			// serve hands main's version and commit (-ldflags) to build info.
			`,revision="` + commit + `",version="` + version + `"} 1`,
			`faxgate_inflight_requests 0`,
			`faxgate_token_refresh_total{result="ok"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if strings.Contains(body, "# EOF") {
			t.Errorf("plain /metrics is OpenMetrics; want Prometheus text by default")
		}
	})

	t.Run("metrics openmetrics", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, g.adminURL+"/metrics", nil)
		req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0; charset=utf-8")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body := string(b)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
			t.Errorf("Content-Type = %q, want application/openmetrics-text", ct)
		}
		if !strings.HasSuffix(body, "# EOF\n") || !strings.Contains(body, "faxgate_requests_total{") ||
			!strings.Contains(body, "faxgate_build_info{") {
			t.Errorf("OpenMetrics body lacks # EOF or the faxgate metrics:\n%.400s", body)
		}
	})

	t.Run("no pprof by default", func(t *testing.T) {
		if code, _ := get(t, g.adminURL+"/debug/pprof/", nil); code != http.StatusNotFound {
			t.Errorf("/debug/pprof/ = %d, want 404 with admin.pprof false", code)
		}
	})

	t.Run("nothing of admin on the proxy listener", func(t *testing.T) {
		for _, p := range []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/"} {
			code, body := get(t, g.proxyURL+p, nil)
			if _, _, e := gatewaytest.Envelope(t, body); code != http.StatusNotFound || e != "unknown_route" {
				t.Errorf("proxy GET %s = %d %s, want 404 unknown_route", p, code, body)
			}
		}
		for _, r := range up.sim.Requests() {
			if !strings.HasPrefix(r.Path, "/v1/") {
				t.Errorf("upstream received %s %s", r.Method, r.Path)
			}
		}
	})

	t.Run("no key in logs", func(t *testing.T) {
		if strings.Contains(g.stderr.String(), testKey) {
			t.Errorf("stderr holds the API key")
		}
	})
}

func TestServePprof(t *testing.T) {
	up := startUpstream(t, testKey)
	g := startServe(t, writeConfig(t, serveOpts{baseURL: up.srv.URL, pprof: true}), nil)
	code, body := get(t, g.adminURL+"/debug/pprof/", nil)
	if code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ = %d, want 200 with the profile index", code)
	}
	if code, _ := get(t, g.adminURL+"/debug/pprof/cmdline", nil); code != http.StatusOK {
		t.Errorf("/debug/pprof/cmdline = %d, want 200", code)
	}
	if code, _ := get(t, g.proxyURL+"/debug/pprof/", nil); code != http.StatusNotFound {
		t.Errorf("proxy /debug/pprof/ = %d, want 404 even with admin.pprof", code)
	}
}

// TestServeKeyRejected: an upstream that rejects the key leaves the gateway
// running but not ready, with a reason saying so, and the key in no log.
func TestServeKeyRejected(t *testing.T) {
	up := startUpstream(t, "sk_test_some-other-key")
	g := startServe(t, writeConfig(t, serveOpts{baseURL: up.srv.URL}), nil)
	var code int
	var reason string
	eventually.Eventually(t, 5*time.Second, "/readyz to give a reason about the key", func() bool {
		var body string
		code, body = get(t, g.adminURL+"/readyz", nil)
		var r struct {
			Ready  bool   `json:"ready"`
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("/readyz body is not JSON: %v\n%s", err, body)
		}
		reason = r.Reason
		return up.sim.AuthCalls() > 0 && strings.Contains(reason, "key")
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(reason, "rejected") || !strings.Contains(reason, "key") {
		t.Errorf("/readyz = %d reason %q, want 503 with a reason saying the key was rejected", code, reason)
	}
	if code, _ := get(t, g.adminURL+"/healthz", nil); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200 while the process runs", code)
	}
	_, body := get(t, g.adminURL+"/metrics", nil)
	if !strings.Contains(body, `faxgate_token_refresh_total{result="invalid_key"}`) {
		t.Errorf("/metrics does not count invalid_key refreshes")
	}
	if strings.Contains(g.stderr.String(), testKey) {
		t.Errorf("stderr holds the API key")
	}
}

// TestServeKeySourceFailure: serve does not start without its key, and says
// why in one stderr line.
func TestServeKeySourceFailure(t *testing.T) {
	up := startUpstream(t, testKey)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-key")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable-key")
	if err := os.WriteFile(unreadable, []byte(testKey), 0o000); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		o      serveOpts
		getenv func(string) (string, bool)
		want   string
	}{
		{"missing file", serveOpts{keyFile: filepath.Join(dir, "no-such-key")}, nil, "upstream.api_key_file"},
		{"empty file", serveOpts{keyFile: empty}, nil, "upstream.api_key_file"},
		{"directory", serveOpts{keyFile: dir}, nil, "is a directory"},
		{"unset env", serveOpts{keyEnv: "FAXGATE_TEST_KEY"}, nil, `upstream.api_key_env: environment variable "FAXGATE_TEST_KEY" is not set`},
		{"empty env", serveOpts{keyEnv: "FAXGATE_TEST_KEY"}, mapEnv(map[string]string{"FAXGATE_TEST_KEY": ""}), `upstream.api_key_env: environment variable "FAXGATE_TEST_KEY" is empty`},
	}
	if os.Geteuid() != 0 { // root reads a mode-000 file anyway
		cases = append(cases, struct {
			name   string
			o      serveOpts
			getenv func(string) (string, bool)
			want   string
		}{"unreadable file", serveOpts{keyFile: unreadable}, nil, "permission denied"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.baseURL = up.srv.URL
			r := runCmd(t, tc.getenv, "serve", "--config", writeConfig(t, tc.o))
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			ls := lines(r.stderr)
			if len(ls) != 1 || !strings.HasPrefix(ls[0], "faxgate: ") || !strings.Contains(ls[0], tc.want) {
				t.Errorf("stderr = %q, want one line \"faxgate: ...\" containing %q", r.stderr, tc.want)
			}
			if strings.Contains(r.stderr, testKey) {
				t.Errorf("stderr holds the key")
			}
			if n := up.sim.AuthCalls(); n != 0 {
				t.Errorf("upstream saw %d auth calls from a gateway that did not start", n)
			}
		})
	}
}

// TestServeListenFailure: a taken port is a failed start, exit 1, one line.
func TestServeListenFailure(t *testing.T) {
	up := startUpstream(t, testKey)
	g := startServe(t, writeConfig(t, serveOpts{baseURL: up.srv.URL}), nil)
	path := writeConfig(t, serveOpts{baseURL: up.srv.URL})
	b, _ := os.ReadFile(path)
	cfg := strings.Replace(string(b), `listen: "127.0.0.1:0"`, `listen: "`+g.proxyAddr+`"`, 1)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t, nil, "serve", "--config", path)
	if r.code != 1 || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, "proxy listener") {
		t.Errorf("exit %d, stderr %q; want 1 and one line about the proxy listener", r.code, r.stderr)
	}
}
