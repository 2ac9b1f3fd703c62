package redisconn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// Logger must fit redis.SetLogger; checked at compile time, not called,
// because the logger is process-wide.
var _ = func() { redis.SetLogger(redisconn.Logger{}) }

func TestLoggerWritesToZap(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var l interface {
		Printf(ctx context.Context, format string, v ...any)
	} = redisconn.Logger{L: zap.New(core)}
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
	got := logs.All()
	if len(got) != 1 || got[0].Message != "redis client" ||
		got[0].ContextMap()["detail"] != "redis: connection pool: failed to dial after 5 attempts: refused" {
		t.Errorf("logged %+v", got)
	}
}

// open is redisconn.New for a configuration that has no CA file to fail
// on; the Conn closes when the test ends.
func open(t testing.TB, c config.Redis, pw redisconn.Passwords, o redisconn.Options) *redisconn.Conn {
	t.Helper()
	if c.Mode == "" {
		c.Mode = config.RedisModeAuto
	}
	rc, err := redisconn.New(c, pw, o)
	if err != nil {
		t.Fatalf("redisconn.New(%+v) = %v", c, err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// mustNew is the client of open, with no password.
func mustNew(t testing.TB, c config.Redis, password string) redis.UniversalClient {
	t.Helper()
	return open(t, c, redisconn.Passwords{Data: redisconn.NewSecret(password)}, redisconn.Options{}).Client()
}

// TestNewShapes: each mode gives its client kind; a cluster with one
// address is a cluster (a managed service's configuration endpoint).
func TestNewShapes(t *testing.T) {
	cases := []struct {
		name string
		c    config.Redis
		want string
	}{
		{"auto, one address", config.Redis{Addrs: []string{"127.0.0.1:1"}}, "single *redis.Client"},
		{"auto, master name", config.Redis{Addrs: []string{"127.0.0.1:1"}, MasterName: "m"}, "sentinel *redis.Client"},
		{"auto, two addresses", config.Redis{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, "cluster *redis.ClusterClient"},
		{"single", config.Redis{Mode: "single", Addrs: []string{"127.0.0.1:1"}}, "single *redis.Client"},
		{"cluster, one address", config.Redis{Mode: "cluster", Addrs: []string{"127.0.0.1:1"}}, "cluster *redis.ClusterClient"},
		{"sentinel", config.Redis{Mode: "sentinel", Addrs: []string{"127.0.0.1:1"}, MasterName: "m"}, "sentinel *redis.Client"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := open(t, tc.c, redisconn.Passwords{}, redisconn.Options{})
			if got := fmt.Sprintf("%s %T", c.Mode(), c.Client()); got != tc.want {
				t.Errorf("New(%+v) = %s, want %s", tc.c, got, tc.want)
			}
			if top := c.Topology(); top.Mode != c.Mode() || strings.Join(top.Addrs, ",") != strings.Join(tc.c.Addrs, ",") {
				t.Errorf("Topology = %+v", top)
			}
		})
	}
}

// TestNewPassword: the data password reaches the node, and a wrong one
// fails without the password in the error.
func TestNewPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret-pw")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	good := mustNew(t, config.Redis{Addrs: []string{srv.Addr}}, "s3cret-pw")
	if err := good.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with the password: %v", err)
	}
	bad := mustNew(t, config.Redis{Addrs: []string{srv.Addr}}, "wrong-pw")
	err := bad.Ping(ctx).Err()
	if err == nil {
		t.Fatalf("PING with a wrong password: no error")
	}
	if strings.Contains(err.Error(), "wrong-pw") {
		t.Errorf("error holds the password: %v", err)
	}
}

// TestSecretNeverPrints: a password renders as [redacted] whatever prints
// it.
func TestSecretNeverPrints(t *testing.T) {
	pw := redisconn.Passwords{Data: redisconn.NewSecret("hunter2-data"), Sentinel: redisconn.NewSecret("hunter2-sentinel")}
	js, _ := json.Marshal(pw)
	core, logs := observer.New(zap.InfoLevel)
	zap.New(core).Info("x", zap.Any("pw", pw), zap.Stringer("data", pw.Data))
	out := fmt.Sprintf("%v %+v %#v %s %q %x", pw, pw, pw, pw.Data, pw.Sentinel, pw.Data) + string(js) +
		fmt.Sprint(logs.All()[0].ContextMap())
	if strings.Contains(out, "hunter2") {
		t.Errorf("a password printed: %s", out)
	}
}

func TestScrubError(t *testing.T) {
	err := redisconn.ScrubError(fmt.Errorf("ERR unknown command 'EVALSHA', with args beginning with: 'abc' 'sealed-value'"))
	if strings.Contains(err.Error(), "sealed-value") || !strings.HasPrefix(err.Error(), "ERR unknown command 'EVALSHA'") {
		t.Errorf("ScrubError = %q", err)
	}
}
