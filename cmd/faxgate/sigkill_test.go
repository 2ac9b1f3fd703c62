package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// TestRejectedKeyLineSurvivesSIGKILL is the regression test of a black-box
// run that read faxgate's log right after /readyz turned 503 for a rejected
// key, and found no line saying why: it was still in main's 1 s log buffer,
// and a SIGKILL (OOM, eviction) would have lost it for good. A line at warn
// or above is written before the call that logs it returns, so every
// rejection the process has counted is in its stderr when it is killed.
func TestRejectedKeyLineSurvivesSIGKILL(t *testing.T) {
	up := startUpstream(t, "sk_test_some-other-key")
	path := writeConfig(t, serveOpts{baseURL: up.srv.URL})
	_, admin := fixListeners(t, path)
	p := startProc(t, "serve", "--config", path)

	client := &http.Client{Timeout: 2 * time.Second}
	fetch := func(path string) (int, string) {
		resp, err := client.Get("http://" + admin + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The condition the line reports, as an operator sees it.
	eventually.EventuallyErr(t, 5*time.Second, "/readyz to say the key was rejected", func() error {
		p.running(t)
		code, body := fetch("/readyz")
		var r struct{ Reason string }
		if code == http.StatusServiceUnavailable && json.Unmarshal([]byte(body), &r) == nil &&
			strings.Contains(r.Reason, "rejected the API secret key") {
			return nil
		}
		return fmt.Errorf("last answer %d %s\nstderr:\n%s", code, body, p.Stderr())
	})
	// Each rejection is counted after its line is logged, under the same
	// lock: every one counted here has been logged.
	_, metrics := fetch("/metrics")
	m := regexp.MustCompile(`(?m)^faxgate_token_refresh_total\{result="invalid_key"\} (\d+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("no invalid_key count in /metrics:\n%s", metrics)
	}
	counted, _ := strconv.Atoi(m[1])

	stderr := p.kill(t)
	logged := 0
	for _, l := range lines(stderr) {
		var e struct{ Level, Msg string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Level == "error" && strings.HasPrefix(e.Msg, "upstream rejected the API secret key") {
			logged++
		}
	}
	if counted < 1 || logged < counted {
		t.Errorf("killed after %d rejections were counted, stderr holds %d lines saying so:\n%s", counted, logged, stderr)
	}
	if strings.Contains(stderr, testKey) {
		t.Errorf("stderr holds the API key")
	}
}
