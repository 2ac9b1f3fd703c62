package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// stalledCallers: loopback peers are nobody, so every request is refused
// as unidentified_caller, and each refusal of a numbers.delete is audited.
const stalledCallers = `
server:
  resend_buffer_bytes: 2097152
  read_timeout: 60s
callers:
  list:
    - name: ops
      cidrs: ["10.9.0.0/16"]
      allow: ["numbers.delete"]
`

// Refused callers cannot make the gateway hold memory without bound: the
// copies of refused bodies read for an audit line's IDs are counted with
// every other body copy under server.resend_buffer_bytes, and when that is
// spoken for the audit line goes without its IDs. Regression: each refused
// numbers.delete read up to 1 MiB + 1 into a fresh buffer of its own, so
// unidentified peers that sent about 1 MiB of a chunked body and then
// stalled held 1-2 MiB each until the read timeout.
//
// The measure is the whole test process's resident memory and the Go heap
// in use; the race detector multiplies both, so it is judged without it
// (make test runs it so).
func TestStalledRefusedUploadsHoldBoundedMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("memory is judged without the race detector (make test runs this test without it)")
	}
	const (
		conns     = 48
		sent      = 1<<20 - 64   // bytes of the chunk each peer sends before it stalls
		declared  = 1<<20 + 4096 // the chunk's declared size: the body never ends
		cap       = 2 << 20      // server.resend_buffer_bytes above
		allowance = 12 << 20     // goroutines, connection buffers, the test's own
	)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: stalledCallers, UpstreamTimeout: 60 * time.Second})
	payload := bytes.Repeat([]byte("a"), sent)
	copy(payload, `{"number_id":"num_1001","order_id":"ord_5001","pad":"`)
	head := "POST /v1/numbers/delete HTTP/1.1\r\nHost: faxgate.test\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\nX-Faxgate-Confirm: num_1001\r\n\r\n" + strconv.FormatInt(declared, 16) + "\r\n"

	runtime.GC()
	debug.FreeOSMemory()
	rss0, heap0 := residentBytes(t), heapInUse()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	for range conns {
		c, err := g.Dial(nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			// Errors are expected: a gateway that refuses at once closes
			// the connection under the write.
			_, _ = c.Write([]byte(head))
			_, _ = c.Write(payload)
		}()
	}
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	wg.Wait()
	// Whatever the gateway reads, it has read by now: the peers stall.
	time.Sleep(500 * time.Millisecond)
	rss1, heap1 := residentBytes(t), heapInUse()
	t.Logf("%d stalled refused uploads of %d KiB: resident memory %+d KiB, heap in use %+d KiB (cap %d KiB)",
		conns, sent>>10, (rss1-rss0)>>10, (heap1-heap0)>>10, cap>>10)
	if grew := rss1 - rss0; grew > cap+allowance {
		t.Errorf("resident memory grew by %d KiB, want at most the cap %d KiB plus %d KiB", grew>>10, cap>>10, allowance>>10)
	}
	if grew := heap1 - heap0; grew > cap+allowance {
		t.Errorf("heap in use grew by %d KiB, want at most the cap %d KiB plus %d KiB", grew>>10, cap>>10, allowance>>10)
	}

	// Every refusal is audited, and those that found the memory spoken for
	// say so with empty IDs rather than holding memory for them.
	for _, c := range open {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	var audits []map[string]any
	for len(audits) < conns && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		audits = g.LogLines("audit")
	}
	if len(audits) != conns {
		t.Fatalf("%d audit lines, want %d", len(audits), conns)
	}
	withIDs := 0
	for _, a := range audits {
		if a["decision"] != "denied" || a["reason"] != "unidentified_caller" {
			t.Errorf("audit line %v, want denied unidentified_caller", a)
		}
		if a["number_id"] != "" {
			withIDs++
		}
	}
	if withIDs > cap/sent {
		t.Errorf("%d audit lines carry IDs: more bodies were held than the cap allows (%d)", withIDs, cap/sent)
	}
}

// residentBytes is this process's resident set size (VmRSS).
func residentBytes(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status on %s: resident memory is measured on Linux", runtime.GOOS)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}
