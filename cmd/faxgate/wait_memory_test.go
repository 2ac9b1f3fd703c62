package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/race"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

// TestWaitingUploadsHoldBoundedMemory is the regression of waiting HTTP/2
// requests pinning their bodies: with TLS on, a budget of 2 requests per
// 20 s and max_wait 25s, 200 requests each sending 2,000,000 bytes of a
// contacts.create body stalled while they waited, and the gateway grew
// from 52 MB to 259 MB: the HTTP/2 server buffered up to 1 MiB of each
// body. A waiting request now holds at most 128 KiB of its unread body,
// over HTTP/2 and HTTP/1.1 alike, so 200 such waiters on 200 connections
// add at most 60 MB to the process
// (docs/upstream-budget.md#waiting-instead-of-refusing).
//
// faxgate runs as its own process (this test binary running main), so the
// measure is the gateway's resident memory alone, read from /proc. The race
// detector multiplies memory: make test runs this test without it.
func TestWaitingUploadsHoldBoundedMemory(t *testing.T) {
	if race.Enabled {
		t.Skip("memory is judged without the race detector (make test runs this test without it)")
	}
	const (
		waiters = 200
		size    = 2_000_000
		bound   = 60 << 20 // what 200 waiters may add to the process
	)
	for _, h2 := range []bool{true, false} {
		name := "HTTP/1.1"
		if h2 {
			name = "HTTP/2"
		}
		t.Run(name, func(t *testing.T) {
			up := startUpstream(t, testKey)
			dir := t.TempDir()
			ca := tlstest.NewCA(t, "wait memory CA")
			cert, key := ca.Server(t, "localhost").WriteFiles(t, dir)
			keyFile := filepath.Join(dir, "api-key")
			tlstest.WriteFile(t, keyFile, []byte(testKey+"\n"))
			path := filepath.Join(dir, "faxgate.yaml")
			tlstest.WriteFile(t, path, []byte(fmt.Sprintf(`server:
  listen: "127.0.0.1:0"
  shutdown_timeout: 30s
  tls: { mode: files, cert_file: %q, key_file: %q }
admin:
  listen: "127.0.0.1:0"
upstream:
  base_url: %q
  api_key_file: %q
  timeout: 60s
log:
  level: warn
callers:
  list:
    - { name: svc, cidrs: ["127.0.0.0/8"], allow: ["*"], rate_limit: { rps: 100000, burst: 100000 } }
upstream_budget:
  max_wait: 25s
  limits:
    - { name: tenant, scope: tenant, requests: 2, per: 20s }
`, cert, key, up.srv.URL, keyFile)))
			proxyAddr, adminAddr := fixListeners(t, path)
			p := startProc(t, "serve", "--config", path)
			tlsCfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}}
			if h2 {
				tlsCfg.NextProtos = []string{"h2", "http/1.1"}
			}
			client := func() *http.Client {
				tr := &http.Transport{TLSClientConfig: tlsCfg.Clone(), ForceAttemptHTTP2: h2}
				if !h2 {
					tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
				return &http.Client{Transport: tr}
			}
			base := "https://" + proxyAddr
			eventually.Eventually(t, 10*time.Second, "faxgate ready", func() bool {
				p.running(t)
				resp, err := http.Get("http://" + adminAddr + "/readyz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == 200
			})
			c0 := client()
			for i := range 2 { // the window's two slots
				resp, err := c0.Post(base+"/v1/contacts/list", "application/json", strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || (h2 && resp.ProtoMajor != 2) {
					t.Fatalf("request %d: %d over %s", i, resp.StatusCode, resp.Proto)
				}
			}
			rss0 := procRSS(t, p)

			var pulled atomic.Int64 // body bytes the gateway let through flow control
			var wg sync.WaitGroup
			var clients []*http.Client
			for range waiters {
				c := client() // one connection each
				clients = append(clients, c)
				req, err := http.NewRequest("POST", base+"/v1/contacts/create", &countingBody{left: size, n: &pulled})
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = size
				req.Header.Set("Content-Type", "application/json")
				wg.Add(1)
				go func() {
					defer wg.Done()
					if resp, err := c.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}()
			}
			waiting := func() int {
				resp, err := http.Get("http://" + adminAddr + "/metrics")
				if err != nil {
					return -1
				}
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if v, ok := strings.CutPrefix(sc.Text(), "faxgate_upstream_budget_waiting "); ok {
						n, _ := strconv.ParseFloat(v, 64)
						return int(n)
					}
				}
				return -1
			}
			eventually.Eventually(t, 60*time.Second, fmt.Sprintf("%d requests waiting", waiters), func() bool {
				p.running(t)
				return waiting() == waiters
			})
			// The uploads stall once flow control (HTTP/2) or the socket
			// buffers (HTTP/1.1) are full: wait until nothing more is sent.
			last, changed := int64(-1), time.Now()
			eventually.Eventually(t, 30*time.Second, "the uploads to stall (nothing sent for 300 ms)", func() bool {
				if n := pulled.Load(); n != last {
					last, changed = n, time.Now()
				}
				return time.Since(changed) >= 300*time.Millisecond
			})
			rss1 := procRSS(t, p)
			t.Logf("%s: %d waiters with stalled %d-byte uploads (%d KiB sent by the clients): faxgate's resident memory %d -> %d MiB (%+d KiB)",
				name, waiters, size, pulled.Load()>>10, rss0>>20, rss1>>20, (rss1-rss0)>>10)
			if grew := rss1 - rss0; grew > bound {
				t.Errorf("faxgate's resident memory grew by %d MiB with %d waiters, want at most %d MiB", grew>>20, waiters, bound>>20)
			}
			p.kill(t)
			for _, c := range clients {
				c.CloseIdleConnections()
			}
			wg.Wait()
		})
	}
}

// procRSS is p's resident set size (VmRSS), read from /proc.
func procRSS(t *testing.T, p *proc) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: resident memory is measured on Linux (%v)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}

// countingBody is a request body of left bytes, made as they are read, so
// the client holds none of it; n counts what was read.
type countingBody struct {
	left int
	n    *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	k := min(len(p), b.left)
	for i := range p[:k] {
		p[i] = 'a'
	}
	b.left -= k
	b.n.Add(int64(k))
	return k, nil
}
