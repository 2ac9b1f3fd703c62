package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestStartClusterReplicas: six nodes, three primaries with a replica
// each, with a password; Slot agrees with the cluster's CLUSTER KEYSLOT;
// a killed primary's replica takes its slots over, with the data.
func TestStartClusterReplicas(t *testing.T) {
	c := redistest.StartClusterReplicas(t, redistest.ClusterOptions{Password: "cluster-pw"})
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 6", len(c.Nodes))
	}
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Password: "cluster-pw", MaxRetries: -1})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range []string{"a", "faxgate:{0123456789abcdef}:token", "faxgate:rl:intake", "{budget}x", "{}x", "x{}y{z}"} {
		want, err := rc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redistest.Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
	primaries := map[string]bool{}
	for i := range 50 {
		primaries[c.PrimaryFor(t, fmt.Sprint("k", i)).Addr] = true
	}
	if len(primaries) != 3 {
		t.Fatalf("keys spread over %d primaries, want 3", len(primaries))
	}

	const key = "survives"
	if err := rc.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := c.PrimaryFor(t, key)
	// WAIT: the replica has the write before the primary dies.
	if n, err := old.Client(t).Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	start := time.Now()
	old.Kill()
	promoted, at := c.WaitPromoted(t, old, redistest.Slot(key))
	t.Logf("cluster primary killed: %s promoted after %v", promoted.Addr, at.Sub(start).Round(time.Millisecond))
	if got, err := promoted.Client(t).Get(ctx, key).Result(); err != nil || got != "1" {
		t.Errorf("GET on the promoted replica = %q, %v; want 1", got, err)
	}
	// A new client learns the new topology (an old one may not: see
	// internal/base/redisconn for what faxgate adds to go-redis).
	fresh := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Password: "cluster-pw", MaxRetries: -1})
	defer fresh.Close()
	eventually.EventuallyErr(t, 10*time.Second, "a new cluster client writing after the failover", func() error {
		return fresh.Set(ctx, key, "2", 0).Err()
	})
}
