package redisconn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestSentinelCredentials: sentinels with a password of their own, as
// Bitnami's chart installs them. With redis.sentinel_password_env the
// client finds the primary; without it the sentinels refuse it (NOAUTH),
// and no error names either password.
func TestSentinelCredentials(t *testing.T) {
	t.Parallel() // own processes; mostly waiting on them
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: "data-pw-1", SentinelPassword: "sentinel-pw-2"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := config.Redis{Mode: "sentinel", Addrs: s.SentinelAddrs(), MasterName: s.MasterName}

	good := open(t, c, redisconn.Passwords{Data: redisconn.NewSecret("data-pw-1"), Sentinel: redisconn.NewSecret("sentinel-pw-2")},
		redisconn.Options{}).Client()
	if err := good.Set(ctx, "via-sentinels", "1", 0).Err(); err != nil {
		t.Fatalf("SET through sentinels with their password: %v", err)
	}
	if got, err := s.Nodes[0].Client(t).Get(ctx, "via-sentinels").Result(); err != nil || got != "1" {
		t.Errorf("GET on the primary = %q, %v; want 1", got, err)
	}

	for name, pw := range map[string]redisconn.Passwords{
		"no sentinel password":    {Data: redisconn.NewSecret("data-pw-1")},
		"wrong sentinel password": {Data: redisconn.NewSecret("data-pw-1"), Sentinel: redisconn.NewSecret("data-pw-1")},
	} {
		t.Run(name, func(t *testing.T) {
			err := open(t, c, pw, redisconn.Options{}).Client().Ping(ctx).Err()
			if err == nil {
				t.Fatal("PING through sentinels that refuse the client: no error")
			}
			if msg := err.Error(); strings.Contains(msg, "pw-1") || strings.Contains(msg, "pw-2") {
				t.Errorf("error names a password: %v", err)
			}
		})
	}
}

// TestSentinelFailoverFollowed: through SENTINEL FAILOVER, the client
// writes to the new primary (go-redis: +switch-master, and READONLY
// connections closed), and the Conn's watch names the new primary,
// counts the change and logs it.
func TestSentinelFailoverFollowed(t *testing.T) {
	t.Parallel() // own processes; mostly waiting on them
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	met := redisconn.NewMetrics(prometheus.NewRegistry())
	core, logs := observer.New(zap.InfoLevel)
	const every = 200 * time.Millisecond
	conn := open(t, config.Redis{Mode: "sentinel", Addrs: s.SentinelAddrs(), MasterName: s.MasterName},
		redisconn.Passwords{Data: redisconn.NewSecret("data-pw"), Sentinel: redisconn.NewSecret("sentinel-pw")},
		redisconn.Options{WatchEvery: every, Metrics: met, Logger: zap.New(core)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); conn.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	first := s.Primary(t)
	eventually.Eventually(t, 5*time.Second, "the watch naming the primary", func() bool {
		top := conn.Topology()
		return len(top.Primaries) == 1 && top.Primaries[0] == first.Addr && top.Error == ""
	})
	rc := conn.Client()
	if err := rc.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Failover(t)
	second, promoted := s.WaitNewPrimary(t, first)
	eventually.EventuallyErr(t, 5*time.Second, "a write reaching the new primary", func() error {
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		defer wcancel()
		if err := rc.Set(wctx, "k", "after", 0).Err(); err != nil {
			return err
		}
		return second.Client(t).Get(wctx, "k").Err()
	})
	t.Logf("writes reach the new primary %v after its promotion", time.Since(promoted).Round(time.Millisecond))
	eventually.Eventually(t, 2*time.Second, "the watch naming the new primary", func() bool {
		top := conn.Topology()
		return len(top.Primaries) == 1 && top.Primaries[0] == second.Addr
	})
	top := conn.Topology()
	if got := testutil.ToFloat64(met.PrimaryChanges); top.Changes != 1 || got != 1 {
		t.Errorf("changes = %d, faxgate_redis_primary_changes_total = %v; want 1 and 1", top.Changes, got)
	}
	if lines := logs.FilterMessageSnippet("Redis primary changed").All(); len(lines) != 1 ||
		lines[0].ContextMap()["to"] != second.Addr || lines[0].ContextMap()["from"] != first.Addr {
		t.Errorf("log lines %v, want one naming %s -> %s", lines, first.Addr, second.Addr)
	}
}

// TestSentinelFailoverMovesSubscriptions: after SENTINEL FAILOVER the old
// primary keeps its role for seconds, until the sentinels reconfigure it,
// and go-redis leaves its pub/sub connections there, where nothing
// published on the new primary arrives. Through faxgate's Conn, which
// closes the connections off the new primary when the sentinels announce
// it, the subscription moves and hears the next message within seconds.
func TestSentinelFailoverMovesSubscriptions(t *testing.T) {
	t.Parallel() // own processes; mostly waiting on them
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	c := config.Redis{Mode: "sentinel", Addrs: s.SentinelAddrs(), MasterName: s.MasterName}
	pw := redisconn.Passwords{Data: redisconn.NewSecret("data-pw"), Sentinel: redisconn.NewSecret("sentinel-pw")}
	conn := open(t, c, pw, redisconn.Options{})
	runConn(t, conn)
	publisher := open(t, c, pw, redisconn.Options{}).Client()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps := conn.Client().Subscribe(ctx, "news")
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	ch := ps.Channel()
	hears := func(payload string) func() bool {
		return func() bool {
			if err := publisher.Publish(ctx, "news", payload).Err(); err != nil {
				return false
			}
			for {
				select {
				case m := <-ch:
					if m.Payload == payload {
						return true
					}
				case <-time.After(20 * time.Millisecond): // the message is on its way, or lost
					return false
				}
			}
		}
	}
	eventually.Eventually(t, 5*time.Second, "the subscription hearing a message before the failover", hears("before"))

	old := s.Primary(t)
	s.Failover(t)
	_, promoted := s.WaitNewPrimary(t, old)
	// Within the sentinels' hello period (2 s): a subscription redialed
	// through a sentinel that has not heard of the failover yet lands on
	// the old primary, and is closed again at the next look.
	eventually.Eventually(t, 3*time.Second, "the subscription hearing the new primary", hears("after"))
	role := "still primary: only the moved subscription can have heard it"
	if old.Client(t).Info(ctx, "replication").Val() == "" || !strings.Contains(old.Client(t).Info(ctx, "replication").Val(), "role:master") {
		role = "already a replica of the new primary"
	}
	t.Logf("the subscription hears the new primary %v after the promotion; the old primary is %s",
		time.Since(promoted).Round(time.Millisecond), role)
}
