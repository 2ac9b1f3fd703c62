package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/vecio"
	"github.com/faxgate/faxgate/internal/testing/writecalls"
)

// writeLog records every write(2) the transport makes on its upstream
// connections.
type writeLog struct {
	mu     sync.Mutex
	writes [][]byte
}

func (l *writeLog) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &loggedConn{Conn: c, log: l}, nil
}

// requestWrites returns the writes from the one that starts the request line
// prefix up to (not including) the next request line.
func (l *writeLog) requestWrites(prefix string) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]byte
	for _, w := range l.writes {
		switch {
		case bytes.HasPrefix(w, []byte(prefix)):
			out = [][]byte{w}
		case out != nil && !bytes.Contains(w, []byte(" HTTP/1.1\r\n")):
			out = append(out, w)
		case out != nil:
			return out
		}
	}
	return out
}

type loggedConn struct {
	net.Conn
	log *writeLog
}

func (c *loggedConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, bytes.Clone(p))
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

// TestSmallBodyGoesUpstreamInOneWrite: a small body of known length is sent
// in the same write(2) as the request's headers. httputil.ReverseProxy,
// which forward.go replaced, hid the body's type from the transport, which
// then flushed the headers on their own: one more syscall and one more
// packet per request.
func TestSmallBodyGoesUpstreamInOneWrite(t *testing.T) {
	var wl writeLog
	tr := &http.Transport{DisableCompression: true, DialContext: wl.dial}
	addr, _ := startGatewayWith(t, tr)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	for _, tc := range []struct {
		name, method, path, body string
		writes                   int
	}{
		{"small POST", "POST", "/v1/contacts/list", `{"page":1,"page_size":20,"filter":{"status":"active"}}`, 1},
		// The transport writes through a 4 KiB buffer: headers and a body
		// that fit it go in one write.
		{"3 KB POST", "POST", "/v1/contacts/list", `{"q":"` + strings.Repeat("a", 3000) + `"}`, 1},
		{"GET", "GET", "/v1/esign_templates", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "http://"+addr+tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			ws := wl.requestWrites(tc.method + " " + tc.path + " ")
			if len(ws) != tc.writes {
				t.Fatalf("the request went upstream in %d writes, want %d", len(ws), tc.writes)
			}
			if !bytes.HasSuffix(ws[0], []byte(tc.body)) {
				t.Fatalf("the write does not end with the body")
			}
		})
	}
}

// writeCounter is a ResponseWriter that keeps every Write and closes
// wrote at the first.
type writeCounter struct {
	h      http.Header
	code   int
	writes [][]byte
	wrote  chan struct{}
}

func (w *writeCounter) Header() http.Header { return w.h }
func (w *writeCounter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *writeCounter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if len(w.writes) == 0 {
		close(w.wrote)
	}
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}
func (w *writeCounter) Flush() {}

// TestSmallResponseReachesTheCallerInOneWrite: a response body of known
// length up to copyBufSize goes to the caller in one Write, however the
// upstream's bytes arrived. The caller's reader is woken once rather than
// once per socket read. A body of unknown length, or a larger one, still
// streams: its first part reaches the caller before the rest exists.
func TestSmallResponseReachesTheCallerInOneWrite(t *testing.T) {
	first := bytes.Repeat([]byte("a"), 10<<10)
	var current atomic.Pointer[writeCounter] // the subtest's caller
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/esign_templates" {
				next.ServeHTTP(w, r)
				return
			}
			size, chunked := 100<<10, false
			switch r.URL.Query().Get("case") {
			case "large":
				size = copyBufSize + 1
			case "chunked":
				chunked = true
			}
			if !chunked {
				w.Header().Set("Content-Length", strconv.Itoa(size))
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(first)
			http.NewResponseController(w).Flush()
			if size > copyBufSize || chunked {
				// A streamed body's first part reaches the caller before
				// the rest exists: wait for it (a held body never comes).
				select {
				case <-current.Load().wrote:
				case <-time.After(5 * time.Second):
				}
			} else {
				time.Sleep(30 * time.Millisecond) // models a slow upstream: the rest arrives in a later read
			}
			_, _ = w.Write(bytes.Repeat([]byte("b"), size-len(first)))
		})
	}
	_, _, h := startGatewayUpstream(t, &http.Transport{DisableCompression: true}, wrap)
	for _, tc := range []struct {
		name  string
		whole bool
	}{
		{"known length, 100 KiB", true},
		{"large", false},
		{"chunked", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/v1/esign_templates?case="+strings.Fields(tc.name)[0], nil)
			req.RemoteAddr = "127.0.0.1:40000"
			w := &writeCounter{h: http.Header{}, wrote: make(chan struct{})}
			current.Store(w)
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				t.Fatalf("status %d", w.code)
			}
			switch {
			case tc.whole && len(w.writes) != 1:
				t.Fatalf("the body went to the caller in %d writes, want 1", len(w.writes))
			case !tc.whole && (len(w.writes) < 2 || len(w.writes[0]) > len(first)):
				t.Fatalf("the first write is %d bytes, want at most the upstream's first %d: the body must stream", len(w.writes[0]), len(first))
			}
			got := bytes.Join(w.writes, nil)
			if !bytes.HasPrefix(got, first) || bytes.Count(got, []byte("b")) != len(got)-len(first) {
				t.Fatal("the body differs from the upstream's")
			}
		})
	}
}

// callerConn is the gateway's end of a caller's TCP connection, recording
// each write call on it, vectored ones included, as the kernel sees them.
type callerConn struct {
	net.Conn
	writecalls.Recorder
	nb net.Buffers
}

func (c *callerConn) Write(p []byte) (int, error) {
	c.Add(p)
	return c.Conn.Write(p)
}

func (c *callerConn) WriteVec(bufs net.Buffers) (int64, error) {
	c.Add(bufs...)
	return vecio.Write(c.Conn, bufs, &c.nb)
}

// writes is the bytes of each write call so far.
func (c *callerConn) writes() []int {
	var out []int
	for _, call := range c.Calls() {
		n := 0
		for _, k := range call {
			n += k
		}
		out = append(out, n)
	}
	return out
}

// TestWholeAnswerReachesTheCallerInOneWrite: over real TCP, through
// net/http's server, an answer of known length up to copyBufSize leaves
// in one write, head and body together (the bench's 64 KB answer among
// them), where net/http alone makes two: the flush of its 4 KiB buffer and
// the rest, written directly or at the handler's end. Every answer arrives
// byte for byte; a larger one streams.
func TestWholeAnswerReachesTheCallerInOneWrite(t *testing.T) {
	body := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(i%26)
		}
		return b
	}
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, err := strconv.Atoi(r.URL.Query().Get("size"))
			if r.URL.Path != "/v1/esign_templates" || err != nil {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(n))
			_, _ = w.Write(body(n))
		})
	}
	conns := make(chan *callerConn, 8)
	addr, _, _ := startGatewayConns(t, &http.Transport{DisableCompression: true}, wrap, func(c net.Conn) net.Conn {
		cc := &callerConn{Conn: c}
		conns <- cc
		return cc
	})
	for _, tc := range []struct {
		size     int
		maxCalls int // 0: any number (the answer streams)
	}{
		{100, 1},
		{4000, 1},
		{5000, 1}, // the flush of 4 KiB is held, and the rest flushed to go with it
		{65631, 1},
		{copyBufSize, 1},
		{copyBufSize + 1, 0},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /v1/esign_templates?size="+strconv.Itoa(tc.size)+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		c.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, body(tc.size)) {
			t.Fatalf("%d bytes: status %d, %d bytes read (%v), or bytes that differ from the upstream's", tc.size, resp.StatusCode, len(got), err)
		}
		calls := (<-conns).writes()
		if tc.maxCalls > 0 && len(calls) > tc.maxCalls {
			t.Errorf("an answer of %d bytes reached the caller in %d writes %v, want at most %d", tc.size, len(calls), calls, tc.maxCalls)
		}
	}
}

// TestWholeAnswerAfterInterimAnswers: a whole answer's held write comes
// after the connection's other writers are done: a 103 Early Hints relayed
// by the transport's goroutine (twice on one connection), and the 100
// Continue net/http writes from the goroutine that reads the body. Run
// with the race detector, it checks that ordering; every answer arrives
// byte for byte.
func TestWholeAnswerAfterInterimAnswers(t *testing.T) {
	const size = 65631
	answer := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("whole") == "" {
				next.ServeHTTP(w, r)
				return
			}
			if r.Method == http.MethodGet {
				w.Header().Set("Link", "</app.js>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Del("Link")
			}
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = w.Write(answer)
		})
	}
	addr, _, _ := startGatewayUpstream(t, &http.Transport{DisableCompression: true}, wrap)
	final := func(br *bufio.Reader, sent func()) {
		t.Helper()
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode >= 200 {
				got, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, answer) {
					t.Fatalf("status %d, %d bytes (%v), or bytes that differ from the upstream's", resp.StatusCode, len(got), err)
				}
				return
			}
			if resp.StatusCode == http.StatusContinue && sent != nil {
				sent()
				sent = nil
			}
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for range 2 {
		if _, err := io.WriteString(c, "GET /v1/esign_templates?whole=1 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		final(br, nil)
	}
	body := `{"type":"individual","is_organization":false,"first_name":"A","last_name":"` + strings.Repeat("B", 100<<10) + `"}`
	if _, err := io.WriteString(c, "POST /v1/contacts/create?whole=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	final(br, func() {
		go func() { _, err := io.WriteString(c, body); wrote <- err }()
	})
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// TestLargeBodyGoesUpstreamWhole: a 1 MiB body arrives upstream whole
// through a transport other than the gateway's own, whose connections
// have no ReadFrom of the gateway's: in net/http's own writes of at most
// 32 KiB. (The gateway's upstream connections gather full reads into
// writes of up to 256 KiB: TestBodySendGathersFullReads.)
func TestLargeBodyGoesUpstreamWhole(t *testing.T) {
	var wl writeLog
	tr := &http.Transport{DisableCompression: true, DialContext: wl.dial}
	addr, sim := startGatewayWith(t, tr)
	head := `{"type":"individual","is_organization":false,"first_name":"A","last_name":"`
	body := head + strings.Repeat("B", 1<<20-len(head)-2) + `"}`
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("POST /v1/contacts/create HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := sim.Requests()
	if got := reqs[len(reqs)-1].BodySize; got != int64(len(body)) {
		t.Fatalf("the upstream got %d bytes, want the %d sent", got, len(body))
	}
	ws := wl.requestWrites("POST /v1/contacts/create ")
	if !bytes.HasSuffix(bytes.Join(ws, nil), []byte(body)) {
		t.Fatal("the bytes written upstream do not end with the body")
	}
	for _, w := range ws {
		if len(w) > 32<<10 {
			t.Fatalf("a write of %d bytes: want net/http's copy of at most 32 KiB", len(w))
		}
	}
}
