//go:build browser

package statuspage_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// callers: intake by address with a burst of 3, billing by the mesh
// header; intake alone is granted the sensitive numbers.delete.
const callers = `
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - name: intake
      cidrs: ["127.0.0.0/8"]
      allow: ["contacts.*", "numbers.delete"]
      rate_limit: { rps: 0.01, burst: 3 }
    - name: billing
      header_values: ["billing"]
      allow: ["*"]
upstream_budget:
  limits:
    - { name: tenant, scope: tenant, requests: 100, per: 1h }
  shares:
    intake: { reserve: 0.2 }
`

// candidate is the shadow candidate: billing is cut down to
// contacts.details, so its contacts.list requests are differences.
var candidate = strings.Replace(callers, `allow: ["*"]`, `allow: ["contacts.details"]`, 1)

// browser starts headless chromium (exe) for the test, its window as the
// screenshots have it, and returns its context: 90 s for the whole test,
// everything closed at its end.
func browser(t *testing.T, exe string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1400), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}

// chromium finds the browser: $FAXGATE_CHROMIUM, else Debian's chromium
// on PATH. Without one the test skips loudly, and fails with CI=true: CI
// must never pass by skipping.
func chromium(t *testing.T) string {
	if p := os.Getenv("FAXGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "statuspage: no chromium on PATH: install it (apt-get install chromium) or set FAXGATE_CHROMIUM; CI fails instead of skipping"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// artifacts is where the screenshot goes: $FAXGATE_TEST_ARTIFACTS, else
// the test's temporary directory.
func artifacts(t *testing.T) string {
	dir := os.Getenv("FAXGATE_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// requests records every URL the page asks for, through the browser's
// own network events.
type requests struct {
	mu   sync.Mutex
	urls []string
	docs int // document (navigation) requests
}

func (r *requests) add(e *network.EventRequestWillBeSent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls = append(r.urls, e.Request.URL)
	if e.Type == network.ResourceTypeDocument {
		r.docs++
	}
}

func (r *requests) snapshot() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.urls...), r.docs
}

// TestStatusPageInBrowser loads the status page in headless Chromium,
// then, without reloading it, sends traffic (a caller over its rate
// limit, a vendor 429 that holds a route) and a config file that fails to
// load. The page must redraw itself with all of it, problems first; it
// must ask no host but the admin listener for anything; and a screenshot
// of it is kept.
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromium(t)
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key, EndpointLimit: faxsim.Window{Requests: 5, Per: time.Minute}})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: callers, Shadow: candidate, Sim: sim, Upstream: up,
		ConfigFile: true})
	admin, err := url.Parse(g.AdminURL)
	if err != nil {
		t.Fatal(err)
	}

	ctx := browser(t, exe)

	var seen requests
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			seen.add(e)
		}
	}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(g.AdminURL+"/"), chromedp.WaitVisible(chromedp.CSS("#callers"))); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	before, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#problems")))
	if err != nil {
		t.Fatal(err)
	}
	// A mark that a reload of the page would wipe out.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.faxgateMark = 42`)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(before, "No problems.") {
		t.Errorf("before any traffic the page shows %q, want no problems", before)
	}

	// Traffic: intake's 4th request is rate limited; billing's 6th gets
	// the vendor's 429 (Retry-After), which holds contacts.list, and its
	// 7th is refused by the hold.
	for i := range 4 {
		if resp, _ := g.Do(t, "POST", "/v1/contacts/details", `{"contact_id":"c1"}`); (i < 3) != (resp.StatusCode != 429) {
			t.Fatalf("intake request %d: %d", i, resp.StatusCode)
		}
	}
	for i := range 7 {
		if resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Faxgate-Caller", "billing"); i >= 5 && resp.StatusCode != 429 {
			t.Fatalf("billing request %d: %d, want 429", i, resp.StatusCode)
		}
	}
	// A reload that fails: a CIDR that is not one.
	g.RewriteConfig(t, strings.Replace(callers, `cidrs: ["127.0.0.0/8"]`, `cidrs: ["127.0.0/8"]`, 1))

	// The page redraws itself (every 2 s) with all of it.
	var problems string
	eventually.EventuallyErr(t, 20*time.Second, "the page updating itself", func() error {
		// Read in one evaluation: a query by node can meet the node the
		// redraw has just replaced ("No node with given id found").
		if problems, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#problems").innerText`)); err != nil {
			return err
		}
		if !strings.Contains(problems, "config reload failed") || !strings.Contains(problems, "contacts.list held") {
			return fmt.Errorf("its problems read %q", problems)
		}
		return nil
	})
	for _, want := range []string{"route contacts.list held after an upstream 429", "config reload failed",
		`callers.list[0].cidrs[0]: invalid CIDR "127.0.0/8"`} {
		if !strings.Contains(problems, want) {
			t.Errorf("the problems read %q, want %q", problems, want)
		}
	}

	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](
		`Array.from(document.querySelectorAll("#callers table tr")).map(tr => Array.from(tr.cells).map(c => c.innerText))`))
	if err != nil {
		t.Fatal(err)
	}
	var color, mark, firstSection string
	for _, e := range []struct {
		js  string
		out *string
	}{
		{`getComputedStyle(document.querySelector("#problems li")).color`, &color},
		{`document.querySelector("main section").id`, &firstSection},
		{`String(window.faxgateMark)`, &mark},
	} {
		if *e.out, err = chromedp.Run(ctx, chromedp.Evaluate[string](e.js)); err != nil {
			t.Fatalf("%s: %v", e.js, err)
		}
	}
	if mark != "42" {
		t.Error("the page was reloaded: it must update itself in place")
	}
	if firstSection != "problems" {
		t.Errorf("the first section is %q, want the problems", firstSection)
	}
	if color != "rgb(176, 0, 32)" {
		t.Errorf("a problem's colour is %s, want red rgb(176, 0, 32)", color)
	}
	// Caller, identified by, allowed routes, rate limit, requests, denials, limited now, waiting.
	want := map[string][]string{"intake": {"4", "1", "yes", "0"}, "billing": {"7", "1", "no", "0"}}
	for _, row := range rows {
		if w, ok := want[row[0]]; ok {
			if got := row[4:8]; strings.Join(got, "|") != strings.Join(w, "|") {
				t.Errorf("caller %s: requests, denials, limited now, waiting %q, want %q", row[0], got, w)
			}
			delete(want, row[0])
		}
	}
	if len(want) > 0 {
		t.Errorf("callers %v not in the table %q", want, rows)
	}

	// The shadow candidate's differences: billing's six requests the live
	// configuration let go and its one the hold refused, all forbidden by
	// the candidate; intake's agree.
	diffs, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](
		`Array.from(document.querySelectorAll("#shadow table tr")).map(tr => Array.from(tr.cells).map(c => c.innerText))`))
	if err != nil {
		t.Fatal(err)
	}
	wantDiffs := map[string]bool{"billing|allowed|forbidden|6": true, "billing|upstream_throttled|forbidden|1": true}
	for _, row := range diffs {
		if len(row) == 4 && row[0] != "Caller" {
			if !wantDiffs[strings.Join(row, "|")] {
				t.Errorf("the shadow section has the row %q", row)
			}
			delete(wantDiffs, strings.Join(row, "|"))
		}
	}
	if len(wantDiffs) > 0 {
		t.Errorf("the shadow section %q lacks %v", diffs, wantDiffs)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifacts(t), "status-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)

	// Everything the page asked for came from the admin listener: one
	// document, and the refreshes of status.json.
	urls, docs := seen.snapshot()
	fetches := 0
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil || pu.Host != admin.Host || pu.Scheme != "http" {
			t.Errorf("the page requested %q: nothing but the admin listener %s may be asked", u, admin.Host)
			continue
		}
		if pu.Path == "/status.json" {
			fetches++
		}
	}
	if docs != 1 || fetches < 1 {
		t.Errorf("%d documents and %d status.json fetches (%q), want 1 document and its refreshes", docs, fetches, urls)
	}
}
