package redistest

import (
	"context"
	"crypto/tls"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
		waitFor(t, clusterTimeout, "cluster_state:ok on "+a, func() bool {
			cctx, ccancel := ctxTimeout(time.Second)
			defer ccancel()
			info, err := c.ClusterInfo(cctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		_ = c.Close()
	}
	return addrs
}
