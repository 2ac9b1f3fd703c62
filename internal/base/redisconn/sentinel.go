package redisconn

// Sentinel failover, as go-redis v9 handles it (docs/deployment.md, What
// faxgate adds to go-redis).
//
// The failover client asks a sentinel for the primary's address on every
// new connection, with the sentinels' own credentials (SentinelUsername,
// SentinelPassword: without them Bitnami's chart answers NOAUTH), and
// subscribes to that sentinel's +switch-master: when it names a new
// primary, every pooled connection to another address is closed. A
// connection still on the demoted node answers writes with READONLY, and
// go-redis closes any connection that answered READONLY instead of
// returning it to the pool. faxgate adds nothing to the routing; it asks
// the sentinels itself every WatchEvery, to show the primary on the status
// page and count the changes.

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/redis/go-redis/v9"
)

// sentinelWatch asks the sentinels which node is primary, through clients
// of its own (the failover client does not expose the address it uses).
type sentinelWatch struct {
	opts []*redis.Options // one per sentinel address

	mu      sync.Mutex
	clients []*redis.SentinelClient // lazily made, parallel to opts
	first   int                     // the sentinel that answered last
}

func newSentinelWatch(u *redis.UniversalOptions) *sentinelWatch {
	w := &sentinelWatch{}
	for _, a := range u.Addrs {
		w.opts = append(w.opts, &redis.Options{Addr: a, Username: u.SentinelUsername, Password: u.SentinelPassword,
			TLSConfig: u.TLSConfig, DialTimeout: u.DialTimeout, ReadTimeout: u.ReadTimeout, WriteTimeout: u.WriteTimeout,
			ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 1, DialerRetries: 1,
			MaintNotificationsConfig: u.MaintNotificationsConfig})
	}
	w.clients = make([]*redis.SentinelClient, len(w.opts))
	return w
}

// primary is the address the first sentinel to answer names for master,
// trying the one that answered last first.
func (w *sentinelWatch) primary(ctx context.Context, master string) (string, error) {
	var errs []error
	for i := range w.opts {
		w.mu.Lock()
		n := (w.first + i) % len(w.opts)
		if w.clients[n] == nil {
			w.clients[n] = redis.NewSentinelClient(w.opts[n])
		}
		c := w.clients[n]
		w.mu.Unlock()
		addr, err := c.GetMasterAddrByName(ctx, master).Result()
		if err == nil && len(addr) == 2 {
			w.mu.Lock()
			w.first = n
			w.mu.Unlock()
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
		if err == nil {
			err = errors.New("unexpected answer to SENTINEL GET-MASTER-ADDR-BY-NAME")
		}
		errs = append(errs, ScrubError(err))
		if ctx.Err() != nil {
			break
		}
	}
	return "", errors.Join(errs...)
}

func (w *sentinelWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, c := range w.clients {
		if c != nil {
			_ = c.Close()
			w.clients[i] = nil
		}
	}
}
