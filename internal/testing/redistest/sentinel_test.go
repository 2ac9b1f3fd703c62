package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestStartSentinels: the production shape, with passwords on the data
// nodes and on the sentinels, fails over for real, once on request and
// once after its primary is killed; each time the sentinels name a new
// primary that takes writes, and the failover client of go-redis follows.
func TestStartSentinels(t *testing.T) {
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	if len(s.Nodes) != 3 || len(s.Watchers) != 3 {
		t.Fatalf("%d nodes, %d sentinels; want 3 and 3", len(s.Nodes), len(s.Watchers))
	}
	first := s.Primary(t)
	if first != s.Nodes[0] {
		t.Fatalf("primary %s, want the first node %s", first.Addr, s.Nodes[0].Addr)
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs(),
		Password: "data-pw", SentinelPassword: "sentinel-pw", MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatalf("SET through the sentinels: %v", err)
	}

	start := time.Now()
	s.Failover(t)
	second, at := s.WaitNewPrimary(t, first)
	t.Logf("SENTINEL FAILOVER: %s promoted after %v", second.Addr, at.Sub(start).Round(time.Millisecond))
	if got, err := second.Client(t).Get(ctx, "k").Result(); err != nil || got != "1" {
		t.Errorf("GET on the new primary = %q, %v; want the replicated 1", got, err)
	}

	start = time.Now()
	second.Kill()
	third, at := s.WaitNewPrimary(t, second)
	t.Logf("primary killed: %s promoted after %v", third.Addr, at.Sub(start).Round(time.Millisecond))
	if third == second {
		t.Fatal("the killed primary is still primary")
	}
	// The failover client finds the new primary through the sentinels.
	eventually.EventuallyErr(t, 10*time.Second, "a SET after the second failover", func() error {
		return c.Set(ctx, "k", "3", 0).Err()
	})
}
