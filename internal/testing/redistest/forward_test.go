package redistest_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestForwarderRepointsNewConnectionsOnly: after Repoint, a connection
// opened before still reaches the first server; a new one reaches the
// second.
func TestForwarderRepointsNewConnectionsOnly(t *testing.T) {
	a := redistest.Start(t)
	b := redistest.Start(t)
	for _, s := range []*redistest.Server{a, b} {
		if err := s.Client(t).Set(t.Context(), "who", s.Addr, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	f := redistest.Forward(t, a.Addr)
	old := dial(t, f.Addr)
	if got := who(t, old); got != a.Addr {
		t.Fatalf("first connection reaches %s, want %s", got, a.Addr)
	}
	f.Repoint(b.Addr)
	if got := who(t, old); got != a.Addr {
		t.Errorf("after Repoint the open connection reaches %s, want still %s", got, a.Addr)
	}
	if got := who(t, dial(t, f.Addr)); got != b.Addr {
		t.Errorf("a new connection reaches %s, want %s", got, b.Addr)
	}
	if n := f.Accepted(); n != 2 {
		t.Errorf("Accepted = %d, want 2", n)
	}
}

type conn struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return conn{c, bufio.NewReader(c)}
}

// who sends GET who in RESP and returns the bulk string.
func who(t *testing.T, c conn) string {
	t.Helper()
	_ = c.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.c.Write([]byte("*2\r\n$3\r\nGET\r\n$3\r\nwho\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.r.ReadString('\n'); err != nil { // $<len>
		t.Fatal(err)
	}
	v, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(v, "\r\n")
}
