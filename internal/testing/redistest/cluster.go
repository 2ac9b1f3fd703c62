package redistest

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// clusterTimeout bounds forming a cluster and waiting for it to serve.
const clusterTimeout = 15 * time.Second

// StartCluster starts n (at least 3) cluster-enabled masters with no replicas,
// joins them with redis-cli --cluster create and waits until every node says
// cluster_state:ok. It returns the nodes' addresses; all stop when the test
// ends.
//
// It needs redis-cli as well as redis-server; a missing one follows Start's
// rule (skip on a laptop, fail when CI is "true"), since the cluster test is
// the only proof of the hash-tag key layout.
func StartCluster(t testing.TB, n int) []string {
	t.Helper()
	return startCluster(t, n, nil)
}

// StartClusterTLS is StartCluster with every node speaking TLS only, to
// clients and on the cluster bus (tls-cluster), with the certificate of f.
// The nodes announce their TLS ports, so a client discovers TLS addresses.
func StartClusterTLS(t testing.TB, n int, f TLSFiles) []string {
	t.Helper()
	return startCluster(t, n, &f)
}

func startCluster(t testing.TB, n int, f *TLSFiles) []string {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a Redis cluster needs at least 3 masters, not %d", n)
	}
	bin := lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	var addrs []string
	for range n {
		// The cluster bus gets its own free port: the default (port+10000)
		// may be taken or out of range for an ephemeral port.
		bus, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "5000",
		}
		var s *Server
		if f == nil {
			s = start(t, bin, "cluster-node", baseConf, args, nil)
		} else {
			s = StartTLS(t, *f, append(args, "--tls-cluster", "yes")...)
		}
		addrs = append(addrs, s.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	var args []string
	if f != nil {
		args = []string{"--tls", "--cacert", f.CAFile, "--sni", f.Hosts[0]}
	}
	args = append(args, "--cluster", "create")
	args = append(args, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		o := &redis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: time.Second}
		if f != nil {
			o.TLSConfig = &tls.Config{RootCAs: f.Pool, ServerName: f.Hosts[0], MinVersion: tls.VersionTLS12}
		}
		c := redis.NewClient(o)
		eventually.Eventually(t, clusterTimeout, "redistest: cluster_state:ok on "+a, func() bool {
			cctx, ccancel := ctxTimeout(time.Second)
			defer ccancel()
			info, err := c.ClusterInfo(cctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		_ = c.Close()
	}
	return addrs
}

// ClusterOptions shape StartClusterReplicas. The zero value is the
// production shape: three primaries with a replica each.
type ClusterOptions struct {
	// Primaries is how many nodes hold slots; default 3.
	Primaries int
	// Password is every node's requirepass and masterauth; "" for none.
	Password string
	// NodeTimeout is cluster-node-timeout: how long a primary stays
	// unreachable before its replica takes over; default 2s.
	NodeTimeout time.Duration
}

// Cluster is a Redis Cluster whose primaries each have a replica, on
// loopback.
type Cluster struct {
	// Nodes are every node, primaries and replicas; which is which changes
	// with failovers (PrimaryFor asks the cluster).
	Nodes    []*Server
	password string
}

// StartClusterReplicas starts 2 x Primaries cluster-enabled nodes, joins
// them with redis-cli --cluster create --cluster-replicas 1, and waits
// until every node says cluster_state:ok, knows every other node, and
// every replica is in sync. All stop when the test ends.
func StartClusterReplicas(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Primaries == 0 {
		o.Primaries = 3
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 2 * time.Second
	}
	bin := lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	c := &Cluster{password: o.Password}
	for range 2 * o.Primaries {
		bus, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := start(t, bin, "cluster-node", func(port int, dir string) string {
			conf := baseConf(port, dir) + fmt.Sprintf("cluster-enabled yes\ncluster-port %d\ncluster-node-timeout %d\n"+
				"cluster-config-file %q\nrepl-diskless-sync-delay 0\n", bus, o.NodeTimeout.Milliseconds(), filepath.Join(dir, "nodes.conf"))
			if o.Password != "" {
				conf += fmt.Sprintf("requirepass %q\nmasterauth %q\n", o.Password, o.Password)
			}
			return conf
		}, nil, nil)
		s.password = o.Password
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	if o.Password != "" {
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+o.Password) // not on the command line
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range c.Nodes {
		rc := n.Client(t)
		eventually.EventuallyErr(t, clusterTimeout, "redistest: cluster node "+n.Addr+" ready", func() error {
			cctx, ccancel := ctxTimeout(time.Second)
			defer ccancel()
			info, err := rc.ClusterInfo(cctx).Result()
			if err != nil {
				return err
			}
			want := fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				return fmt.Errorf("not yet ok with every node known:\n%s", info)
			}
			repl, err := rc.Info(cctx, "replication").Result()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica not in sync:\n%s", repl)
			}
			return nil
		})
	}
	return c
}

// Addrs are every node's address: redis.addrs of a gateway (or pick one as
// the configuration endpoint).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Node returns the node at addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// owner is the address that a running node's CLUSTER SLOTS names for slot,
// as every running node agrees; "" while they disagree.
func (c *Cluster) owner(slot int64) (string, error) {
	seen := ""
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: n.Addr, Password: c.password, DialTimeout: time.Second,
			ReadTimeout: time.Second, MaxRetries: -1})
		ctx, cancel := ctxTimeout(time.Second)
		//lint:ignore SA1019 the map as go-redis and faxgate read it (CLUSTER SHARDS needs Redis 7)
		slots, err := rc.ClusterSlots(ctx).Result()
		cancel()
		_ = rc.Close()
		if err != nil {
			return "", err
		}
		addr := ""
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				addr = r.Nodes[0].Addr
			}
		}
		if seen != "" && addr != seen {
			return "", fmt.Errorf("%s names %s for slot %d, another node %s", n.Addr, addr, slot, seen)
		}
		seen = addr
	}
	if seen == "" {
		return "", fmt.Errorf("no running node names an owner of slot %d", slot)
	}
	return seen, nil
}

// PrimaryFor is the primary that holds key's slot now.
func (c *Cluster) PrimaryFor(t testing.TB, key string) *Server {
	t.Helper()
	var n *Server
	eventually.EventuallyErr(t, clusterTimeout, "redistest: the primary of "+key, func() error {
		addr, err := c.owner(Slot(key))
		if err != nil {
			return err
		}
		if n = c.Node(addr); n == nil {
			return fmt.Errorf("slot owner %s is not a node of this cluster", addr)
		}
		return nil
	})
	return n
}

// WaitPromoted waits until the slots old held are held by another node,
// every running node agrees, and that node reports role:master. It returns
// the new primary and when that was first seen.
func (c *Cluster) WaitPromoted(t testing.TB, old *Server, slot int64) (*Server, time.Time) {
	t.Helper()
	var n *Server
	eventually.EventuallyErr(t, clusterTimeout, "redistest: a replica of "+old.Addr+" promoted", func() error {
		addr, err := c.owner(slot)
		if err != nil {
			return err
		}
		if addr == old.Addr {
			return fmt.Errorf("slot %d still on %s", slot, addr)
		}
		if n = c.Node(addr); n == nil {
			return fmt.Errorf("slot owner %s is not a node of this cluster", addr)
		}
		return n.isPrimary()
	})
	return n, time.Now()
}
