package redisconn_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// writeScript writes through a Lua script, as every shared decision does.
var writeScript = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)

// TestReadonlyConnectionNotReused: one address (a DNS name, a Kubernetes
// Service: here a forwarder) in front of the primary. The primary is
// demoted to a replica of the other node, and the address repointed: the
// pooled connections still reach the demoted node and its writes answer
// READONLY. go-redis closes each connection that answered READONLY instead
// of pooling it again, so each stale connection fails at most once, and
// once a write succeeds through the new primary every later one does.
func TestReadonlyConnectionNotReused(t *testing.T) {
	t.Parallel() // own processes; mostly waiting on them
	nodes := redistest.StartReplicated(t, 1, "pw")
	old, next := nodes[0], nodes[1]
	addr := redistest.Forward(t, old.Addr)
	rc := open(t, config.Redis{Mode: "single", Addrs: []string{addr.Addr}},
		redisconn.Passwords{Data: redisconn.NewSecret("pw")}, redisconn.Options{}).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Several pooled connections, all to the primary of the moment.
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 20 {
				if err := writeScript.Run(ctx, rc, []string{"k"}, "before").Err(); err != nil {
					t.Errorf("write before the failover: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	stale := faxgateConns(t, old)
	if stale < 2 {
		t.Fatalf("%d faxgate connections on the primary, want several pooled", stale)
	}

	// The failover, as Sentinel or a managed service performs it (without
	// the CLIENT KILL Sentinel adds), and the address repointed.
	if err := next.Client(t).ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := old.Client(t).ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(next.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	addr.Repoint(next.Addr)

	eventually.EventuallyErr(t, 10*time.Second, "a write through the new primary", func() error {
		return writeScript.Run(ctx, rc, []string{"k"}, "after").Err()
	})
	for i := range 20 {
		if err := writeScript.Run(ctx, rc, []string{"k"}, "after").Err(); err != nil {
			t.Fatalf("write %d after the first through the new primary: %v", i, err)
		}
	}
	// The demoted node's own count of READONLY answers: at most one per
	// stale connection, and each connection that answered it is closed.
	answered := readonlyAnswers(t, old)
	if answered < 1 || answered > stale {
		t.Fatalf("the demoted node answered READONLY %d times with %d stale connections; want 1 to %d", answered, stale, stale)
	}
	eventually.Eventually(t, 5*time.Second, "every connection that answered READONLY closed", func() bool {
		return faxgateConns(t, old) == stale-answered
	})
	t.Logf("%d stale connections, %d answered READONLY once each and were closed", stale, answered)
}

// readonlyAnswers is how many READONLY errors s has answered (INFO
// errorstats).
func readonlyAnswers(t *testing.T, s *redistest.Server) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := s.Client(t).Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "errorstat_READONLY:count=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\r", 2)[0]))
	return n
}

// faxgateConns counts the connections named faxgate (redisconn's
// ClientName) on s.
func faxgateConns(t *testing.T, s *redistest.Server) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	list, err := s.Client(t).ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(list, " name=faxgate ")
}
