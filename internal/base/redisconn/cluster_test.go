package redisconn_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestClusterConfigurationEndpoint: redis.mode cluster with one address,
// the configuration endpoint a managed service gives (here a forwarder in
// front of one node, as a DNS name is): the client discovers every node
// from it and reaches keys on every primary directly, the watch lists the
// three primaries, and once discovered the endpoint is not needed.
func TestClusterConfigurationEndpoint(t *testing.T) {
	t.Parallel() // own processes; mostly waiting on them
	cl := redistest.StartClusterReplicas(t, redistest.ClusterOptions{Password: "cluster-pw"})
	endpoint := redistest.Forward(t, cl.Nodes[0].Addr)
	conn := open(t, config.Redis{Mode: "cluster", Addrs: []string{endpoint.Addr}},
		redisconn.Passwords{Data: redisconn.NewSecret("cluster-pw")}, redisconn.Options{WatchEvery: 100 * time.Millisecond})
	runConn(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	primaries := map[string]bool{}
	for i := range 30 {
		k := fmt.Sprint("key-", i)
		if err := conn.Client().Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s through the endpoint: %v", k, err)
		}
		primaries[cl.PrimaryFor(t, k).Addr] = true
	}
	if len(primaries) != 3 {
		t.Fatalf("the keys landed on %d primaries, want 3", len(primaries))
	}
	eventually.Eventually(t, 5*time.Second, "the watch listing the three primaries", func() bool {
		return len(conn.Topology().Primaries) == 3
	})
	// The endpoint served the discovery only: with it gone, the keys and
	// the slot map are read from the nodes themselves.
	endpoint.Repoint("127.0.0.1:1")
	checked := conn.Topology().Checked
	for i := range 30 {
		if err := conn.Client().Set(ctx, fmt.Sprint("key-", i), i, 0).Err(); err != nil {
			t.Fatalf("SET with the endpoint gone: %v", err)
		}
	}
	eventually.Eventually(t, 5*time.Second, "the watch reading the cluster with the endpoint gone", func() bool {
		top := conn.Topology()
		return top.Checked.After(checked) && top.Error == "" && len(top.Primaries) == 3
	})
}

// TestClusterKilledPrimary shows what go-redis v9 does when a cluster
// primary is killed and what faxgate adds. Three clients write one key
// every 50 ms before, during and after the failover: go-redis as shipped
// keeps writing to the dead address (no MOVED ever comes, and its slot map
// is read again only once it is a minute old); faxgate's Conn reroutes at
// the first failure after the promotion. A fourth, quiet Conn sends
// nothing: its watch has read the new slot map by the time it is needed.
func TestClusterKilledPrimary(t *testing.T) {
	t.Parallel() // own processes; mostly waiting on them
	cl := redistest.StartClusterReplicas(t, redistest.ClusterOptions{Password: "cluster-pw"})
	pw := redisconn.Passwords{Data: redisconn.NewSecret("cluster-pw")}
	c := config.Redis{Mode: "cluster", Addrs: cl.Addrs()}
	const every = 500 * time.Millisecond
	faxgate := open(t, c, pw, redisconn.Options{WatchEvery: every})
	runConn(t, faxgate)
	quiet := open(t, c, pw, redisconn.Options{WatchEvery: every})
	runConn(t, quiet)
	unwatched := open(t, c, pw, redisconn.Options{WatchEvery: every}) // the hook, no Run
	plain := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Password: "cluster-pw",
		ReadTimeout: time.Second, WriteTimeout: time.Second, DialTimeout: 2 * time.Second, MaxRetries: 1})
	t.Cleanup(func() { _ = plain.Close() })

	const key = "faxgate:{0123456789abcdef}:token"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, rc := range []redis.UniversalClient{faxgate.Client(), quiet.Client(), unwatched.Client(), plain} {
		if err := rc.Set(ctx, key, "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	writers := map[string]*writer{"faxgate": write(ctx, faxgate.Client(), key), "go-redis": write(ctx, plain, key)}

	old := cl.PrimaryFor(t, key)
	old.Kill()
	promoted, at := cl.WaitPromoted(t, old, redistest.Slot(key))

	w := writers["faxgate"]
	eventually.Eventually(t, 10*time.Second, "faxgate's client writing to the promoted replica", func() bool {
		return !w.lastOK().IsZero() && w.lastOK().After(at)
	})
	took := w.lastOK().Sub(at)
	t.Logf("promoted %s; faxgate writes again %v after the promotion", promoted.Addr, took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("faxgate's client wrote again %v after the promotion, want within 3s", took)
	}
	// go-redis alone is still on the dead node well after that. If this
	// starts failing, go-redis reroutes by itself and the hook may go.
	eventually.Never(t, 3*time.Second, "go-redis alone writing again within seconds of the promotion", func() bool {
		return writers["go-redis"].lastOK().After(at)
	})

	// The quiet clients: the watched one's slot map is the new one before
	// it sends anything; the unwatched one's is still the old.
	eventually.Eventually(t, 5*time.Second, "the quiet client's watch seeing the new primary", func() bool {
		for _, p := range quiet.Topology().Primaries {
			if p == promoted.Addr {
				return true
			}
		}
		return false
	})
	masterOf := func(conn *redisconn.Conn) string {
		m, err := conn.Client().(*redis.ClusterClient).MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	eventually.Eventually(t, 5*time.Second, "the quiet client's slot map naming the promoted replica", func() bool {
		return masterOf(quiet) == promoted.Addr
	})
	if got := masterOf(unwatched); got != old.Addr {
		t.Errorf("a client without the watch routes %s to %s; want the stale %s this test contrasts with", key, got, old.Addr)
	}
}

// writer writes a key every 50 ms until ctx ends, noting its last success.
type writer struct {
	mu sync.Mutex
	ok time.Time
}

func write(ctx context.Context, rc redis.UniversalClient, key string) *writer {
	w := &writer{}
	go func() {
		tick := time.NewTicker(50 * time.Millisecond) // paces the load
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err := rc.Set(wctx, key, "v", 0).Err()
			cancel()
			if err == nil {
				w.mu.Lock()
				w.ok = time.Now()
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *writer) lastOK() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ok
}

// runConn runs c's watch until the test ends.
func runConn(t testing.TB, c *redisconn.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
