package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// StartSentinel starts a master and one sentinel monitoring it with quorum 1,
// for tests of the sentinel configuration (redis.master_name). Both stop when
// the test ends.
func StartSentinel(t testing.TB) (master *Server, sentinelAddr string, masterName string) {
	t.Helper()
	return startSentinel(t, nil)
}

// StartSentinelTLS is StartSentinel with the master and the sentinel
// speaking TLS only, with the certificate of f; the sentinel reaches the
// master over TLS too (tls-replication).
func StartSentinelTLS(t testing.TB, f TLSFiles) (master *Server, sentinelAddr string, masterName string) {
	t.Helper()
	return startSentinel(t, &f)
}

func startSentinel(t testing.TB, f *TLSFiles) (master *Server, sentinelAddr string, masterName string) {
	t.Helper()
	if f == nil {
		master = Start(t)
	} else {
		master = StartTLS(t, *f)
	}
	masterName = "faxgate-test"
	bin := master.bin
	sentinel := start(t, bin, "sentinel", func(port int, dir string) string {
		listen := fmt.Sprintf("port %d\n", port)
		if f != nil {
			listen = fmt.Sprintf("port 0\ntls-port %d\ntls-cert-file %q\ntls-key-file %q\ntls-ca-cert-file %q\n"+
				"tls-auth-clients no\ntls-replication yes\n", port, f.CertFile, f.KeyFile, f.CAFile)
		}
		return listen + fmt.Sprintf("bind 127.0.0.1\nprotected-mode no\ndir %q\n"+
			"sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %s 5000\n",
			dir, masterName, master.Port, masterName)
	}, []string{"--sentinel"}, master.tls)

	// The sentinel knows the master from its config at once; wait until it
	// answers for it, so the test starts from a working setup.
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr, DialTimeout: time.Second, ReadTimeout: time.Second, TLSConfig: master.tls})
	defer c.Close()
	want := []string{"127.0.0.1", strconv.Itoa(master.Port)}
	eventually.Eventually(t, readyTimeout, "redistest: the sentinel to report its master", func() bool {
		ctx, cancel := ctxTimeout(time.Second)
		defer cancel()
		got, err := c.GetMasterAddrByName(ctx, masterName).Result()
		return err == nil && len(got) == 2 && got[0] == want[0] && got[1] == want[1]
	})
	return master, sentinel.Addr, masterName
}

// StartReplicated starts a primary and n replicas of it, each with the
// requirepass and masterauth password ("" for none), and waits until every
// replica is in sync. The primary is first. Nothing fails them over: that
// is for a test to do by hand (REPLICAOF), or for StartSentinels.
func StartReplicated(t testing.TB, n int, password string) []*Server {
	t.Helper()
	nodes, _ := startReplicated(t, n, password, false)
	return nodes
}

// startReplicated is StartReplicated; with links, each replica reaches the
// primary through a Forwarder of its own, returned in replica order, that
// a test can make drop the replication stream.
func startReplicated(t testing.TB, n int, password string, links bool) ([]*Server, []*Forwarder) {
	t.Helper()
	bin := lookPath(t, "redis-server")
	auth := ""
	if password != "" {
		auth = fmt.Sprintf("requirepass %q\nmasterauth %q\n", password, password)
	}
	node := func(replicaOf int) *Server {
		s := start(t, bin, "redis", func(port int, dir string) string {
			// A replica syncs at once, not after the default 5 s of
			// waiting for more replicas to share the transfer.
			c := baseConf(port, dir) + auth + "repl-diskless-sync-delay 0\n"
			if replicaOf != 0 {
				c += fmt.Sprintf("replicaof 127.0.0.1 %d\n", replicaOf)
			}
			return c
		}, nil, nil)
		s.password = password
		return s
	}
	primary := node(0)
	nodes := []*Server{primary}
	var fwds []*Forwarder
	for range n {
		port := primary.Port
		if links {
			f := Forward(t, primary.Addr)
			fwds = append(fwds, f)
			port = f.port()
		}
		nodes = append(nodes, node(port))
	}
	pc := primary.Client(t)
	eventually.EventuallyErr(t, sentinelTimeout, "redistest: every replica in sync", func() error {
		ctx, cancel := ctxTimeout(time.Second)
		defer cancel()
		info, err := pc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if got := strings.Count(info, ",state=online,"); got != n {
			return fmt.Errorf("%d of %d replicas online:\n%s", got, n, info)
		}
		return nil
	})
	return nodes, fwds
}

// SentinelOptions shape StartSentinels. The zero value is the production
// shape a Helm chart installs: a primary, two replicas, three sentinels.
type SentinelOptions struct {
	// Replicas of the primary; default 2.
	Replicas int
	// Sentinels watching them, with quorum a majority; default 3.
	Sentinels int
	// Password is the data nodes' requirepass (and masterauth, so a demoted
	// primary can follow the new one); "" for none.
	Password string
	// SentinelPassword is the sentinels' own requirepass (and the
	// sentinel-pass they use with each other); "" for none.
	SentinelPassword string
	// DownAfter is down-after-milliseconds: how long a primary stays
	// unreachable before the sentinels start a failover; default 1s.
	DownAfter time.Duration
	// Links, when set, makes each replica reach the primary through a
	// Forwarder (Sentinels.Links): a test can then partition the
	// replication stream, so that the primary's last writes never reach a
	// replica.
	Links bool
}

// Sentinels is a primary with replicas, watched by sentinels that fail it
// over, all on loopback. Nodes[0] starts as the primary.
type Sentinels struct {
	// MasterName is the name the sentinels know the primary by.
	MasterName string
	// Nodes are the data nodes; which is primary changes with failovers
	// (Primary asks the sentinels).
	Nodes []*Server
	// Watchers are the sentinel processes.
	Watchers []*Server
	// Links are the replicas' links to the first primary, in the order of
	// Nodes[1:] (SentinelOptions.Links); nil otherwise.
	Links []*Forwarder

	sentinelPassword string
}

// sentinelTimeout bounds forming the topology and each failover wait.
const sentinelTimeout = 20 * time.Second

// StartSentinels starts the data nodes, waits until every replica is in
// sync, starts the sentinels and waits until each knows the primary, every
// replica and every other sentinel, so a failover can start at once. All
// processes stop when the test ends.
func StartSentinels(t testing.TB, o SentinelOptions) *Sentinels {
	t.Helper()
	if o.Replicas == 0 {
		o.Replicas = 2
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	if o.DownAfter == 0 {
		o.DownAfter = time.Second
	}
	bin := lookPath(t, "redis-server")
	st := &Sentinels{MasterName: "faxgate-ha", sentinelPassword: o.SentinelPassword}
	// The sentinels learn the replicas from the primary's first INFO:
	// StartReplicated has them connected by then.
	st.Nodes, st.Links = startReplicated(t, o.Replicas, o.Password, o.Links)
	primary := st.Nodes[0]

	quorum := o.Sentinels/2 + 1
	for range o.Sentinels {
		w := start(t, bin, "sentinel", func(port int, dir string) string {
			c := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %q\nloglevel notice\n", port, dir)
			if o.SentinelPassword != "" {
				c += fmt.Sprintf("requirepass %q\nsentinel sentinel-pass %q\n", o.SentinelPassword, o.SentinelPassword)
			}
			c += fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n", st.MasterName, primary.Port, quorum)
			if o.Password != "" {
				c += fmt.Sprintf("sentinel auth-pass %s %q\n", st.MasterName, o.Password)
			}
			// A short failover-timeout lets a test fail over twice; the
			// replicas are reconfigured well within it on loopback.
			return c + fmt.Sprintf("sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 4000\n",
				st.MasterName, o.DownAfter.Milliseconds(), st.MasterName)
		}, []string{"--sentinel"}, nil)
		w.password = o.SentinelPassword
		st.Watchers = append(st.Watchers, w)
	}
	for _, w := range st.Watchers {
		c := st.sentinelClient(w.Addr)
		eventually.EventuallyErr(t, sentinelTimeout, "redistest: sentinel "+w.Addr+" to know the whole topology", func() error {
			ctx, cancel := ctxTimeout(time.Second)
			defer cancel()
			if addr, err := c.GetMasterAddrByName(ctx, st.MasterName).Result(); err != nil || len(addr) != 2 ||
				addr[1] != strconv.Itoa(primary.Port) {
				return fmt.Errorf("primary %v, %v", addr, err)
			}
			if rs, err := c.Replicas(ctx, st.MasterName).Result(); err != nil || len(rs) != o.Replicas {
				return fmt.Errorf("%d replicas known, %v", len(rs), err)
			}
			if ss, err := c.Sentinels(ctx, st.MasterName).Result(); err != nil || len(ss) != o.Sentinels-1 {
				return fmt.Errorf("%d other sentinels known, %v", len(ss), err)
			}
			return nil
		})
		_ = c.Close()
	}
	return st
}

// SentinelAddrs are the sentinels' addresses: redis.addrs of a gateway.
func (s *Sentinels) SentinelAddrs() []string {
	out := make([]string, len(s.Watchers))
	for i, w := range s.Watchers {
		out[i] = w.Addr
	}
	return out
}

// sentinelClient talks to the sentinel at addr with the sentinels' password.
func (s *Sentinels) sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: addr, Password: s.sentinelPassword,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
}

// PrimaryAddr is the primary's address as a majority of the running
// sentinels reports it; "" while they disagree or none answers.
func (s *Sentinels) PrimaryAddr() string {
	votes := map[string]int{}
	running := 0
	for _, w := range s.Watchers {
		if !w.running() {
			continue
		}
		running++
		c := s.sentinelClient(w.Addr)
		ctx, cancel := ctxTimeout(time.Second)
		addr, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
		cancel()
		_ = c.Close()
		if err == nil && len(addr) == 2 {
			votes[net.JoinHostPort(addr[0], addr[1])]++
		}
	}
	for addr, n := range votes {
		if n > running/2 {
			return addr
		}
	}
	return ""
}

// Node returns the data node at addr, or nil.
func (s *Sentinels) Node(addr string) *Server {
	for _, n := range s.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Primary is the data node the sentinels name as primary.
func (s *Sentinels) Primary(t testing.TB) *Server {
	t.Helper()
	n := s.Node(s.PrimaryAddr())
	if n == nil {
		t.Fatalf("redistest: the sentinels name no primary of this topology")
	}
	return n
}

// Failover asks one sentinel for a failover (SENTINEL FAILOVER: the
// primary is demoted to a replica of the best replica, without waiting
// for agreement) and returns at once.
func (s *Sentinels) Failover(t testing.TB) {
	t.Helper()
	c := s.sentinelClient(s.Watchers[0].Addr)
	defer c.Close()
	ctx, cancel := ctxTimeout(5 * time.Second)
	defer cancel()
	if err := c.Failover(ctx, s.MasterName).Err(); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
}

// WaitNewPrimary waits until a majority of the sentinels names a primary
// other than old, and that node itself reports role:master. It returns
// the new primary and when both were first seen true.
func (s *Sentinels) WaitNewPrimary(t testing.TB, old *Server) (*Server, time.Time) {
	t.Helper()
	var n *Server
	eventually.EventuallyErr(t, sentinelTimeout, "redistest: a new primary promoted", func() error {
		addr := s.PrimaryAddr()
		if addr == "" || addr == old.Addr {
			return fmt.Errorf("the sentinels name %q", addr)
		}
		n = s.Node(addr)
		if n == nil {
			return fmt.Errorf("the sentinels name %s, not a node of this topology", addr)
		}
		return n.isPrimary()
	})
	return n, time.Now()
}

// isPrimary is nil when the server reports role:master.
func (s *Server) isPrimary() error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password, TLSConfig: s.tls,
		DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:master") {
		return fmt.Errorf("%s is not a primary yet", s.Addr)
	}
	return nil
}
