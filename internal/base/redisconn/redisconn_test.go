package redisconn_test

import (
	"context"
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

// TestNewShapes: the redis section's three shapes give the three client kinds.
func TestNewShapes(t *testing.T) {
	cases := []struct {
		name string
		c    config.Redis
		want string
	}{
		{"single", config.Redis{Addrs: []string{"127.0.0.1:1"}}, "*redis.Client"},
		{"sentinel", config.Redis{Addrs: []string{"127.0.0.1:1"}, MasterName: "m"}, "*redis.Client"},
		{"cluster", config.Redis{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, "*redis.ClusterClient"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustNew(t, tc.c, "")
			defer c.Close()
			var got string
			switch c.(type) {
			case *redis.Client:
				got = "*redis.Client"
			case *redis.ClusterClient:
				got = "*redis.ClusterClient"
			default:
				got = "other"
			}
			if got != tc.want {
				t.Errorf("New(%+v) = %s, want %s", tc.c, got, tc.want)
			}
		})
	}
}

func TestNewPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret-pw")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	good := mustNew(t, config.Redis{Addrs: []string{srv.Addr}}, "s3cret-pw")
	defer good.Close()
	if err := good.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with the password: %v", err)
	}
	bad := mustNew(t, config.Redis{Addrs: []string{srv.Addr}}, "wrong-pw")
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil {
		t.Errorf("PING with a wrong password: no error")
	}
}
