package redisconn

import (
	"context"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Topology is what a Conn knows of the Redis it uses, for the status page
// (docs/status-page.md): never a password.
type Topology struct {
	// Mode is single, cluster or sentinel.
	Mode string
	// Addrs are redis.addrs: the node, the cluster nodes or configuration
	// endpoint, or the sentinels.
	Addrs []string
	// MasterName is redis.master_name (sentinel).
	MasterName string
	// Primaries are the primaries last seen: the one the sentinels name, or
	// every cluster node that holds slots. Empty before the first look, and
	// for a single node.
	Primaries []string
	// Since is when this process first saw Primaries as they are; zero
	// before the first look.
	Since time.Time
	// Checked is when the topology was last read successfully; zero before.
	Checked time.Time
	// Changes counts the changes of primary seen since the start.
	Changes int64
	// Error is why the last look failed, "" when it worked.
	Error string
}

// Topology returns what Run saw last.
func (c *Conn) Topology() Topology {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.view
	t.Addrs = slices.Clone(t.Addrs)
	t.Primaries = slices.Clone(t.Primaries)
	return t
}

// record keeps the result of one look: a change of primaries from a known
// set to another is logged and counted, and with sentinel the connections
// to any other node are closed.
func (c *Conn) record(primaries []string, err error) {
	now := c.now()
	c.mu.Lock()
	if err != nil {
		c.view.Error = ScrubError(err).Error()
		c.mu.Unlock()
		return
	}
	c.view.Error, c.view.Checked = "", now
	old := c.view.Primaries
	changed := !slices.Equal(primaries, old)
	if changed {
		c.view.Primaries, c.view.Since = primaries, now
		if old != nil {
			c.view.Changes++
		}
	}
	c.mu.Unlock()
	closed := 0
	if c.conns != nil && old != nil {
		// Every look, not only at a change: a connection redialed through
		// a sentinel that had not heard of the failover yet is on the old
		// primary again. A primary known by a name that does not resolve
		// here cannot be told from another node: nothing is closed.
		if keep, ok := resolve(primaries); ok {
			closed = c.conns.closeExcept(keep)
		}
	}
	if !changed || old == nil { // the first look: nothing changed
		if closed > 0 {
			c.log.Info("closed Redis connections that were not to the primary", zap.String("primary", strings.Join(primaries, ",")),
				zap.Int("connections_closed", closed))
		}
		return
	}
	if c.met != nil {
		c.met.PrimaryChanges.Inc()
	}
	c.log.Warn("Redis primary changed (a failover, or a cluster's slots moved)", zap.String("mode", c.mode),
		zap.String("from", strings.Join(old, ",")), zap.String("to", strings.Join(primaries, ",")),
		zap.Int("connections_closed", closed))
}

// resolve turns host:port addresses (sentinels may announce host names)
// into the ip:port a connection to them has as its peer; ok is false when
// a name does not resolve.
func resolve(addrs []string) (peers map[string]bool, ok bool) {
	peers = map[string]bool{}
	for _, a := range addrs {
		peers[a] = true
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, false
		}
		if net.ParseIP(host) != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		cancel()
		if err != nil || len(ips) == 0 {
			return nil, false
		}
		for _, ip := range ips {
			peers[net.JoinHostPort(ip, port)] = true
		}
	}
	return peers, true
}

// Metrics are redisconn's collectors.
type Metrics struct {
	// PrimaryChanges is faxgate_redis_primary_changes_total.
	PrimaryChanges prometheus.Counter
}

// NewMetrics creates the collectors and registers them on reg. The counter
// exists at 0 from the start, with or without Redis in use, so increase()
// sees the first failover.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{PrimaryChanges: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "faxgate_redis_primary_changes_total",
		Help: "Changes of the Redis primary this replica saw: a new primary named by the sentinels, or a cluster slot range served by another primary (a failover, or a resharding).",
	})}
	reg.MustRegister(m.PrimaryChanges)
	return m
}
