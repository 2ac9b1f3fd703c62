package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
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
// in the same write(2) as the request's headers. ReverseProxy hides the
// body's type from the transport, which then flushes the headers on their
// own: one more syscall and one more packet per request.
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
