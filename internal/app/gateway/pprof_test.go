package gateway_test

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// With admin.pprof: true the block and mutex profiles record events (they
// were served, but always empty), and the rates go back when the gateway
// stops.
func TestPprofRecordsBlockingAndContention(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: "admin:\n  pprof: true\n"})
	if got := runtime.SetMutexProfileFraction(-1); got != 100 {
		t.Fatalf("mutex profile fraction %d while serving, want 100", got)
	}
	// Some blocking: a 20 ms wait on a channel, always recorded at a rate
	// of one event per 100 µs blocked.
	ready := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(ready) }() // models a slow peer: the block to record
	<-ready
	if body := profile(t, g, "block"); !strings.Contains(body, "TestPprofRecordsBlockingAndContention") {
		t.Errorf("/debug/pprof/block has no event of this test:\n%.600s", body)
	}
	// Contention: two goroutines taking one lock in turn, in rounds until
	// a sampled event shows (one in 100 is; a round makes thousands).
	var mu sync.Mutex
	var body string
	for round := 0; round < 20 && !strings.Contains(body, "TestPprofRecordsBlockingAndContention"); round++ {
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5000 {
					mu.Lock()
					runtime.Gosched()
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		body = profile(t, g, "mutex")
	}
	if !strings.Contains(body, "TestPprofRecordsBlockingAndContention") {
		t.Errorf("/debug/pprof/mutex has no event of this test:\n%.600s", body)
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := runtime.SetMutexProfileFraction(-1); got != 0 {
		t.Errorf("mutex profile fraction %d after the gateway stopped, want 0 again", got)
	}
}

// profile fetches /debug/pprof/<name>?debug=1 from g's admin listener.
func profile(t *testing.T, g *gatewaytest.Gateway, name string) string {
	t.Helper()
	resp, err := http.Get(g.AdminURL + "/debug/pprof/" + name + "?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/debug/pprof/%s: %d", name, resp.StatusCode)
	}
	return string(b)
}
