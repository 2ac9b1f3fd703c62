package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Forwarder is a TCP forwarder on a free loopback port: the DNS name or
// Kubernetes Service in front of Redis. Each new connection goes to the
// target of the moment; Repoint changes it for new connections only, so
// connections already open stay on the old node, as they do when a
// Service's endpoints or a DNS record change after a failover.
type Forwarder struct {
	// Addr is where clients connect.
	Addr string

	ln       net.Listener
	target   atomic.Pointer[string]
	accepted atomic.Int64
	drop     atomic.Bool
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// Forward starts a forwarder to target; it stops, with every connection it
// carries, when the test ends.
func Forward(t testing.TB, target string) *Forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: forwarder: %v", err)
	}
	f := &Forwarder{Addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	f.target.Store(&target)
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.close)
	return f
}

// port is the port of Addr.
func (f *Forwarder) port() int { return f.ln.Addr().(*net.TCPAddr).Port }

// Repoint sends every later connection to target.
func (f *Forwarder) Repoint(target string) { f.target.Store(&target) }

// Drop, while on, drops every byte in both directions instead of
// forwarding it: a network partition, in which what one side sends never
// reaches the other. The connections stay open.
func (f *Forwarder) Drop(on bool) { f.drop.Store(on) }

// Target is where new connections go now.
func (f *Forwarder) Target() string { return *f.target.Load() }

// Accepted counts the connections accepted so far.
func (f *Forwarder) Accepted() int64 { return f.accepted.Load() }

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.accepted.Add(1)
		up, err := net.Dial("tcp", f.Target())
		if err != nil {
			_ = c.Close() // as a Service without a ready endpoint: refused
			continue
		}
		if !f.track(c, up) {
			return
		}
		f.wg.Add(2)
		go f.pipe(c, up)
		go f.pipe(up, c)
	}
}

// track records a pair of connections, or closes them when the forwarder
// is closing.
func (f *Forwarder) track(a, b net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		_, _ = a.Close(), b.Close()
		return false
	}
	f.conns[a], f.conns[b] = struct{}{}, struct{}{}
	return true
}

// pipe copies one direction; when either side ends, both close, as a
// proxy's connection does.
func (f *Forwarder) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	_, _ = io.Copy(dropper{dst, &f.drop}, src)
	_, _ = dst.Close(), src.Close()
	f.mu.Lock()
	if f.conns != nil {
		delete(f.conns, dst)
		delete(f.conns, src)
	}
	f.mu.Unlock()
}

func (f *Forwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	f.wg.Wait()
}

// dropper writes to w unless drop is on, then discards.
type dropper struct {
	w    io.Writer
	drop *atomic.Bool
}

func (d dropper) Write(p []byte) (int, error) {
	if d.drop.Load() {
		return len(p), nil
	}
	return d.w.Write(p)
}
