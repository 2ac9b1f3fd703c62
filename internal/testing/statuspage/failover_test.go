//go:build browser

package statuspage_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestStatusPageDuringFailover: a gateway on Sentinel, its page open in
// headless Chromium, traffic flowing, and the primary killed. The page
// names the topology and the primary; during the failover it shows Redis in
// fallback among its problems (a screenshot is kept: docs/status-page.md);
// after it, the new primary and the change.
func TestStatusPageDuringFailover(t *testing.T) {
	exe := chromium(t)
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	g := gatewaytest.Start(t, gatewaytest.Options{Config: callers, Redis: &gatewaytest.Redis{Mode: "sentinel",
		Addrs: s.SentinelAddrs(), MasterName: s.MasterName, Password: "data-pw", SentinelPassword: "sentinel-pw"}})
	old := s.Primary(t)

	ctx := browser(t, exe)
	if err := chromedp.Do(ctx, chromedp.Navigate(g.AdminURL+"/"), chromedp.WaitVisible(chromedp.CSS("#redis"))); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	// The text of a section, read in one step: the page redraws its
	// sections every 2 s, so a node found by one call may be gone by the
	// next.
	text := func(sel string) string {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector("`+sel+`") || {}).innerText || ""`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	eventually.Eventually(t, 10*time.Second, "the page naming the topology and the primary", func() bool {
		r := text("#redis")
		return strings.Contains(r, "sentinel (master "+s.MasterName+")") && strings.Contains(r, old.Addr)
	})

	// billing's requests, decided in Redis, until the test ends.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 2000 {
			select {
			case <-stop:
				return
			default:
			}
			g.Do(t, "POST", "/v1/contacts/list", `{}`, "X-Faxgate-Caller", "billing")
			time.Sleep(20 * time.Millisecond) // paces the load
		}
	})
	defer func() { close(stop); wg.Wait() }()

	old.Kill()
	eventually.Eventually(t, 20*time.Second, "the page showing Redis in fallback during the failover", func() bool {
		return strings.Contains(text("#problems"), "Redis in fallback")
	})
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifacts(t), "status-page-failover.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)

	next, _ := s.WaitNewPrimary(t, old)
	eventually.Eventually(t, 20*time.Second, "the page naming the new primary, the change, and no fallback", func() bool {
		r := text("#redis")
		return strings.Contains(r, next.Addr) && strings.Contains(r, "Primary changes\t1") &&
			!strings.Contains(text("#problems"), "Redis in fallback")
	})
}
