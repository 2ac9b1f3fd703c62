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
	// Some blocking (a 20 ms wait on a lock) and contention (two
	// goroutines taking one lock in turn, far more than the one event in
	// 100 that is sampled).
	var mu sync.Mutex
	mu.Lock()
	done := make(chan struct{})
	go func() { mu.Lock(); mu.Unlock(); close(done) }()
	time.Sleep(20 * time.Millisecond)
	mu.Unlock()
	<-done
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20000 {
				mu.Lock()
				runtime.Gosched()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, name := range []string{"block", "mutex"} {
		resp, err := http.Get(g.AdminURL + "/debug/pprof/" + name + "?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "TestPprofRecordsBlockingAndContention") {
			t.Errorf("/debug/pprof/%s: %d, no event of this test in:\n%.600s", name, resp.StatusCode, body)
		}
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := runtime.SetMutexProfileFraction(-1); got != 0 {
		t.Errorf("mutex profile fraction %d after the gateway stopped, want 0 again", got)
	}
}
