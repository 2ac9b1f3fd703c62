package redisconn

import (
	"context"
	"net"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// connSet is a hook that remembers every connection the client dials
// (command, pipeline and pub/sub pools alike), so that the ones left on a
// node that is no longer primary can be closed (closeExcept). go-redis
// closes its command connections to a demoted primary on +switch-master,
// but not its pub/sub connections: they stay on the old primary, which
// keeps its role for seconds after a SENTINEL FAILOVER and so hears
// nothing the new primary publishes.
type connSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newConnSet() *connSet { return &connSet{conns: map[net.Conn]struct{}{}} }

func (s *connSet) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		t := &trackedConn{Conn: c, set: s}
		t.self = t
		if sc, ok := c.(syscall.Conn); ok {
			// go-redis checks an idle connection's health through its
			// socket; keep that possible where the dialed conn allows it.
			t.self = &trackedSysConn{trackedConn: t, sys: sc}
		}
		s.mu.Lock()
		s.conns[t.self] = struct{}{}
		s.mu.Unlock()
		return t.self, nil
	}
}

func (s *connSet) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (s *connSet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// closeExcept closes every connection whose peer is not one of keep
// (host:port as dialed: the IP addresses a name resolves to). It returns
// how many it closed.
func (s *connSet) closeExcept(keep map[string]bool) int {
	s.mu.Lock()
	var stale []net.Conn
	for c := range s.conns {
		if !keep[c.RemoteAddr().String()] {
			stale = append(stale, c)
		}
	}
	s.mu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
	return len(stale)
}

// trackedConn forgets itself when closed.
type trackedConn struct {
	net.Conn
	set  *connSet
	self net.Conn // the value in set: this, or its trackedSysConn
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c.self)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// trackedSysConn is a trackedConn over a connection with a socket.
type trackedSysConn struct {
	*trackedConn
	sys syscall.Conn
}

func (c *trackedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sys.SyscallConn() }
