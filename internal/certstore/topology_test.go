package certstore_test

// The storage on the topologies production runs (docs/deployment.md, Redis
// in production).

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/redis/go-redis/v9"
)

// TestConformanceRedisSentinel: the storage through Sentinel, with
// passwords on the data nodes and on the sentinels (docs/deployment.md,
// Redis in production).
func TestConformanceRedisSentinel(t *testing.T) {
	t.Parallel() // own processes; mostly waiting on them
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	c, err := redisconn.New(config.Redis{Mode: "sentinel", Addrs: s.SentinelAddrs(), MasterName: s.MasterName},
		redisconn.Passwords{Data: redisconn.NewSecret("data-pw"), Sentinel: redisconn.NewSecret("sentinel-pw")}, redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	conformance(t, redisOpener(c.Client()))
}

// TestConformanceRedisCluster: on a cluster whose primaries have replicas,
// List, Exists and Delete of a directory must see every master's keys,
// since the keys of one directory spread over the slots.
func TestConformanceRedisCluster(t *testing.T) {
	t.Parallel() // own processes; mostly waiting on them
	addrs := redistest.StartClusterReplicas(t, redistest.ClusterOptions{}).Addrs()
	c := client(t, addrs...)
	conformance(t, redisOpener(c))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := newPrefix()
	s := store(c, p, time.Second, nil)
	var want []string
	for i := range 30 {
		k := fmt.Sprintf("certificates/acme/d%02d.example/d%02d.example.crt", i, i)
		mustStore(t, ctx, s, k, []byte("x"))
		want = append(want, k)
	}
	got, err := s.List(ctx, "certificates", true)
	if err != nil {
		t.Fatal(err)
	}
	if n := countSuffix(got, ".crt"); n != 30 {
		t.Errorf("List over the cluster found %d of 30 keys", n)
	}
	// The test proves something only if the keys did spread.
	var holding atomic.Int32
	_ = c.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, p+"*").Result()
		if err == nil && len(keys) > 0 {
			holding.Add(1)
		}
		return nil
	})
	if holding.Load() < 2 {
		t.Errorf("the keys landed on %d master(s); want them spread over several", holding.Load())
	}
	if err := s.Delete(ctx, "certificates"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, want[0]) || s.Exists(ctx, "certificates") {
		t.Errorf("Delete(directory) left keys on some master")
	}
}

func countSuffix(keys []string, suffix string) int {
	n := 0
	for _, k := range keys {
		if strings.HasSuffix(k, suffix) {
			n++
		}
	}
	return n
}
