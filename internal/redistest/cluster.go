package redistest

import (
	"context"
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
		s := start(t, bin, "cluster-node", baseConf, []string{
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "5000",
		}, nil)
		addrs = append(addrs, s.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: time.Second})
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
