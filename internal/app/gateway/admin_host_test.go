package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// TestAdminAnswersOnlyItsOwnNames is the DNS-rebinding regression: a page
// that rebinds its own name to the admin address sends that name as Host,
// and must read nothing, not /status.json with every caller's CIDRs.
func TestAdminAnswersOnlyItsOwnNames(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
admin:
  allowed_hosts: ["faxgate-metrics.payments.svc", "Faxgate-Metrics.payments.svc.cluster.local."]
callers:
  list:
    - { name: intake, cidrs: ["127.0.0.0/8"], allow: ["*"] }
`})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(g.AdminURL, "http://"))
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + port, 200},
		{"127.0.0.1", 200},
		{"[::1]:" + port, 200},
		{"[::1]", 200},
		{"10.2.3.4:9090", 200}, // a pod IP, as Prometheus and the kubelet send it
		{"localhost:" + port, 200},
		{"LOCALHOST", 200},
		{"faxgate-metrics.payments.svc:9090", 200},
		{"FAXGATE-METRICS.PAYMENTS.SVC", 200},
		{"faxgate-metrics.payments.svc.cluster.local", 200},
		{"rebind.attacker.example", 421},
		{"rebind.attacker.example:" + port, 421},
		{"localhost.attacker.example", 421},
		{"127.0.0.1.nip.io", 421},
		{"faxgate-metrics.payments.svc.attacker.example", 421},
		{"", 421},
	} {
		for _, path := range []string{"/status.json", "/metrics", "/readyz", "/budget", "/"} {
			status, body := rawAdminGet(t, g.AdminURL, path, tc.host)
			if status != tc.want {
				t.Errorf("Host %q, GET %s: status %d, want %d", tc.host, path, status, tc.want)
			}
			if tc.want == 421 && body != "" {
				t.Errorf("Host %q, GET %s: a refused request got a body: %.80q", tc.host, path, body)
			}
		}
	}
}

// rawAdminGet sends GET path with exactly the Host given ("" sends an
// HTTP/1.0 request with none) and returns the status and body.
func rawAdminGet(t *testing.T, adminURL, path, host string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(adminURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"
	if host == "" {
		req = "GET " + path + " HTTP/1.0\r\n\r\n"
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("Host %q: %v", host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminCutsSlowHeaders: a head trickled a byte at a time is cut at
// server.read_header_timeout, as on the proxy listener, not at a fixed 5 s;
// and an idle connection is closed at server.idle_timeout.
func TestAdminCutsSlowHeaders(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
server:
  read_header_timeout: 500ms
  idle_timeout: 700ms
callers:
  list:
    - { name: intake, cidrs: ["127.0.0.0/8"], allow: ["*"] }
`})
	addr := strings.TrimPrefix(g.AdminURL, "http://")

	t.Run("trickled head", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		closed := make(chan time.Duration, 1)
		go func() {
			_, _ = io.Copy(io.Discard, c)
			closed <- time.Since(start)
		}()
		head := "GET /status.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + strings.Repeat("a", 100)
		for i := 0; i < len(head); i++ {
			if _, err := c.Write([]byte{head[i]}); err != nil {
				break // cut off: what the test wants
			}
			select {
			case d := <-closed:
				if d > 2*time.Second {
					t.Fatalf("a trickled head was cut after %v, want about read_header_timeout (500ms)", d)
				}
				return
			default:
			}
			time.Sleep(50 * time.Millisecond) // models a client trickling its head
		}
		select {
		case d := <-closed:
			if d > 2*time.Second {
				t.Fatalf("a trickled head was cut after %v, want about read_header_timeout (500ms)", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a trickled head was never cut off")
		}
	})

	t.Run("idle connection", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("an idle keep-alive connection sent more bytes")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("an idle connection was closed after %v, want about idle_timeout (700ms)", d)
		}
	})
}
