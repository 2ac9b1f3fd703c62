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

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/race"
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
	if race.Enabled {
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
	// The peers stall. Wait until the gateway has read whatever it will
	// read: every request has reached the handler (refused and audited, or
	// still reading its body), and no byte a peer sent waits in the kernel
	// on either side of a connection.
	port := g.Addr[strings.LastIndexByte(g.Addr, ':')+1:]
	eventually.EventuallyErr(t, 10*time.Second, "the gateway to have read what the peers sent", func() error {
		// The queues first: decoding the log is the costlier look, and its
		// garbage would count in the heap measured below.
		if q := queuedToward(t, port); q != 0 {
			return fmt.Errorf("%d bytes still queued toward the gateway", q)
		}
		if n, inflight := len(g.LogLines("audit")), int(testutil.ToFloat64(g.Metrics.Proxy.Inflight)); n+inflight != conns {
			return fmt.Errorf("%d audited and %d in the handler, want %d in all", n, inflight, conns)
		}
		return nil
	})
	rss1, heap1 := residentBytes(t), heapInUse()
	t.Logf("%d stalled refused uploads of %d KiB: resident memory %+d KiB, heap in use %+d KiB (cap %d KiB)",
		conns, sent>>10, (rss1-rss0)>>10, (heap1-heap0)>>10, cap>>10)
	if grew := rss1 - rss0; grew > cap+allowance {
		t.Errorf("resident memory grew by %d KiB, want at most the cap %d KiB plus %d KiB", grew>>10, cap>>10, allowance>>10)
	}
	if grew := heap1 - heap0; grew > cap+allowance {
		t.Errorf("heap in use grew by %d KiB, want at most the cap %d KiB plus %d KiB", grew>>10, cap>>10, allowance>>10)
	}

	// The refused bodies that are being read are counted under the cap,
	// and hold it now (48 peers want far more than 2 MiB).
	if held := g.Handler.BodyMemoryHeld(); held <= 0 || held > cap {
		t.Errorf("body memory held during the stall: %d bytes, want some and at most the cap %d", held, cap)
	}

	// Every refusal is audited; once the peers are gone, every byte
	// counted is released.
	for _, c := range open {
		c.Close()
	}
	audits := waitLines(t, g, conns, conns)
	if len(audits) != conns {
		t.Fatalf("%d audit lines, want %d", len(audits), conns)
	}
	for _, a := range audits {
		if a["decision"] != "denied" || a["reason"] != "unidentified_caller" {
			t.Errorf("audit line %v, want denied unidentified_caller", a)
		}
	}
	if held := g.Handler.BodyMemoryHeld(); held != 0 {
		t.Errorf("%d bytes of body memory still counted after every request ended, want 0", held)
	}
}

// queuedToward sums the bytes the kernel holds on their way to the
// loopback listener on port, as /proc/net/tcp shows them: sent by a peer and
// not yet delivered (the peer's tx_queue) or delivered and not yet read by
// the server (its rx_queue). A listening socket's queue is its backlog, not
// bytes, and is left out. The table lists every socket of the machine's
// network namespace (thousands on a busy one), so it is read line by line
// without allocating per line: the garbage would count in the heap the test
// measures.
func queuedToward(t *testing.T, port string) int64 {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp on %s: the socket queues are read on Linux", runtime.GOOS)
	}
	defer f.Close()
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatalf("port %q: %v", port, err)
	}
	hexPort := []byte(fmt.Sprintf(":%04X", p))
	var sum int64
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		ln := sc.Bytes()
		local, remote, state, queues := procField(ln, 1), procField(ln, 2), procField(ln, 3), procField(ln, 4)
		if queues == nil || bytes.Equal(state, []byte("0A")) { // 0A: listening
			continue
		}
		tx, rx, _ := bytes.Cut(queues, []byte(":"))
		var q []byte
		switch {
		case bytes.HasSuffix(local, hexPort): // the gateway's end
			q = rx
		case bytes.HasSuffix(remote, hexPort): // a peer's end
			q = tx
		default:
			continue
		}
		var n int64
		for _, c := range q {
			d := strings.IndexByte("0123456789ABCDEF", c)
			if d < 0 {
				t.Fatalf("/proc/net/tcp line %q: queue %q", ln, q)
			}
			n = n<<4 | int64(d)
		}
		sum += n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// procField is the i-th blank-separated field of a /proc table line, or
// nil.
func procField(ln []byte, i int) []byte {
	for {
		ln = bytes.TrimLeft(ln, " ")
		if len(ln) == 0 {
			return nil
		}
		end := bytes.IndexByte(ln, ' ')
		if end < 0 {
			end = len(ln)
		}
		if i == 0 {
			return ln[:end]
		}
		ln, i = ln[end:], i-1
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

// A granted delete's body is read for its audit line even when the body
// memory is spoken for (here there is none at all): refused callers that
// hold it cannot make a delete that is carried out be audited without its
// number_id. Regression: only policy.confirm routes' bodies were read
// regardless, so with numbers.delete sensitive but not confirmed, a full
// cap gave a forwarded delete an audit line with number_id "".
func TestGrantedDeleteIsAuditedWithItsIDsWhateverTheBodyMemory(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
server:
  resend_buffer_bytes: 0
callers:
  list:
    - name: ops
      cidrs: ["127.0.0.0/8"]
      allow: ["*", "numbers.delete"]
policy:
  sensitive: ["numbers.delete"]
  confirm: []
`})
	for i, chunkedBody := range []bool{false, true} {
		// Each deletes another of faxsim's numbers.
		num, order := "num_100"+strconv.Itoa(i+1), "ord_500"+strconv.Itoa(i+1)
		head := "POST /v1/numbers/delete HTTP/1.1\r\nHost: faxgate.test\r\nContent-Type: application/json\r\nConnection: close\r\n"
		body := `{"number_id":"` + num + `","order_id":"` + order + `"}`
		raw := head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		if chunkedBody {
			raw = head + "Transfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
		}
		before, access := len(g.LogLines("audit")), len(g.LogLines("request"))
		out := g.Raw(t, raw, 5*time.Second)
		if !strings.HasPrefix(out, "HTTP/1.1 200 ") {
			t.Fatalf("chunked=%v: want the delete forwarded, got %q", chunkedBody, out)
		}
		audits := waitLines(t, g, access+1, before+1)
		if len(audits) != before+1 {
			t.Fatalf("chunked=%v: %d audit lines, want %d", chunkedBody, len(audits), before+1)
		}
		a := audits[before]
		if a["decision"] != "forwarded" || a["number_id"] != num || a["order_id"] != order {
			t.Errorf("chunked=%v: audit line %v, want forwarded with number_id %s and order_id %s", chunkedBody, a, num, order)
		}
	}
}
