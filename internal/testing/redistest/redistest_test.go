package redistest_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/testing/redistest"
)

func TestStartServesAndForgets(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	// No persistence: nothing may be written to disk.
	if got, err := c.ConfigGet(ctx, "save").Result(); err != nil || got["save"] != "" {
		t.Errorf("CONFIG GET save = %v, %v; want empty", got, err)
	}
	if got, err := c.ConfigGet(ctx, "appendonly").Result(); err != nil || got["appendonly"] != "no" {
		t.Errorf("CONFIG GET appendonly = %v, %v; want no", got, err)
	}

	s.Kill()
	if conn, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after Kill", s.Addr)
	}

	s.Restart(t)
	// Same address, same client (go-redis reconnects), data gone as after a crash.
	_, err := c.Get(ctx, "k").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		// The pool's first connection may be the dead one; one more try must work.
		_, err = c.Get(ctx, "k").Result()
	}
	if !errors.Is(err, redis.Nil) {
		t.Errorf("GET after Restart: err = %v, want redis.Nil", err)
	}
}

func TestStartExtraArgs(t *testing.T) {
	s := redistest.Start(t, "--maxmemory", "12mb")
	got, err := s.Client(t).ConfigGet(context.Background(), "maxmemory").Result()
	if err != nil || got["maxmemory"] != "12582912" {
		t.Errorf("CONFIG GET maxmemory = %v, %v; want 12582912", got, err)
	}
}

func TestStartSentinel(t *testing.T) {
	master, addr, name := redistest.StartSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: name, SentinelAddrs: []string{addr}})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Set(ctx, "via-sentinel", "1", 0).Err(); err != nil {
		t.Fatalf("SET through sentinel: %v", err)
	}
	if got, err := master.Client(t).Get(ctx, "via-sentinel").Result(); err != nil || got != "1" {
		t.Errorf("GET on master = %q, %v; want 1", got, err)
	}
}
