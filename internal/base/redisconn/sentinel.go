package redisconn

// Sentinel failover, as go-redis v9 handles it, and what faxgate adds
// (docs/deployment.md, What faxgate adds to go-redis).
//
// The failover client asks a sentinel for the primary's address on every
// new connection, with the sentinels' own credentials (SentinelUsername,
// SentinelPassword: without them Bitnami's chart answers NOAUTH), and
// subscribes to that sentinel's +switch-master: when it names a new
// primary, every pooled command connection to another address is closed.
// A connection still on a demoted node answers writes with READONLY, and
// go-redis closes any connection that answered READONLY instead of
// returning it to the pool.
//
// It leaves the pub/sub connections where they are. After a SENTINEL
// FAILOVER the old primary keeps its role until the sentinels reconfigure
// it, about ten seconds later: meanwhile it is a primary of its own, and a
// subscription on it hears nothing the fleet publishes on the new one (the
// holds of docs/upstream-budget.md, the token notices of docs/tokens.md).
// faxgate adds the missing step: it subscribes to +switch-master on every
// sentinel itself (and asks them every WatchEvery), and on a new primary
// closes every connection of its client that is not to it, pub/sub
// included, so that each subscription reconnects to the new primary at
// once. The primary it learns is also what the status page shows.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// sentinelWatch asks the sentinels which node is primary, through clients
// of its own (the failover client does not expose the address it uses).
type sentinelWatch struct {
	opts []*redis.Options // one per sentinel address

	mu      sync.Mutex
	clients []*redis.SentinelClient // lazily made, parallel to opts
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

// primary is the address of master that the sentinels with the newest
// configuration epoch name, and that epoch. While a failover spreads,
// sentinels that have not heard of it still name the old primary; the
// epoch tells which view is newer, so the watch never swings back to a
// demoted node.
func (w *sentinelWatch) primary(ctx context.Context, master string) (string, int64, error) {
	type view struct {
		addr  string
		epoch int64
		err   error
	}
	views := make([]view, len(w.opts))
	var wg sync.WaitGroup
	for n := range w.opts {
		w.mu.Lock()
		if w.clients[n] == nil {
			w.clients[n] = redis.NewSentinelClient(w.opts[n])
		}
		c := w.clients[n]
		w.mu.Unlock()
		wg.Go(func() {
			m, err := c.Master(ctx, master).Result()
			if err != nil {
				views[n].err = ScrubError(err)
				return
			}
			epoch, _ := strconv.ParseInt(m["config-epoch"], 10, 64)
			if m["ip"] == "" || m["port"] == "" {
				views[n].err = errors.New("unexpected answer to SENTINEL MASTER")
				return
			}
			views[n] = view{addr: net.JoinHostPort(m["ip"], m["port"]), epoch: epoch}
		})
	}
	wg.Wait()
	best := view{epoch: -1}
	var errs []error
	for _, v := range views {
		switch {
		case v.err != nil:
			errs = append(errs, v.err)
		case v.epoch > best.epoch:
			best = v
		}
	}
	if best.addr == "" {
		return "", 0, errors.Join(errs...)
	}
	return best.addr, best.epoch, nil
}

// switches calls found each time a sentinel publishes +switch-master for
// master, until ctx ends. It subscribes on every sentinel: any one of them
// may be down.
func (w *sentinelWatch) switches(ctx context.Context, master string, found func()) {
	var wg sync.WaitGroup
	for n := range w.opts {
		w.mu.Lock()
		if w.clients[n] == nil {
			w.clients[n] = redis.NewSentinelClient(w.opts[n])
		}
		c := w.clients[n]
		w.mu.Unlock()
		wg.Go(func() {
			ps := c.Subscribe(ctx, "+switch-master")
			defer ps.Close()
			ch := ps.Channel() // reconnects by itself; closed by ps.Close
			for {
				select {
				case <-ctx.Done():
					return
				case m, ok := <-ch:
					if !ok {
						return
					}
					// "<master> <old ip> <old port> <new ip> <new port>"
					if f := strings.Fields(m.Payload); len(f) == 5 && f[0] == master {
						found()
					}
				}
			}
		})
	}
	wg.Wait()
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
