package config

import (
	"strings"
	"testing"
)

// TestRedisTopologies: every topology docs/deployment.md shows is accepted
// and resolves to its mode; auto keeps its meaning of before redis.mode.
func TestRedisTopologies(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Redis
		want string
	}{
		{"default", Redis{Mode: RedisModeAuto, Addrs: []string{"127.0.0.1:6379"}}, RedisModeSingle},
		{"auto, several addrs", Redis{Mode: RedisModeAuto, Addrs: []string{"a:1", "b:1", "c:1"}}, RedisModeCluster},
		{"auto, master name", Redis{Mode: RedisModeAuto, Addrs: []string{"s:26379"}, MasterName: "m"}, RedisModeSentinel},
		{"auto, sentinel credentials", Redis{Mode: RedisModeAuto, Addrs: []string{"s0:26379", "s1:26379"}, MasterName: "m",
			SentinelUsername: "u", SentinelPasswordEnv: "SENTINEL_PW"}, RedisModeSentinel},
		{"single", Redis{Mode: RedisModeSingle, Addrs: []string{"redis-master:6379"}}, RedisModeSingle},
		{"cluster, configuration endpoint", Redis{Mode: RedisModeCluster, Addrs: []string{"clustercfg.example:6379"}}, RedisModeCluster},
		{"cluster, nodes", Redis{Mode: RedisModeCluster, Addrs: []string{"a:1", "b:1"}}, RedisModeCluster},
		{"sentinel", Redis{Mode: RedisModeSentinel, Addrs: []string{"s:26379"}, MasterName: "mymaster",
			SentinelPasswordEnv: "SENTINEL_PW"}, RedisModeSentinel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.r.KeyPrefix = "faxgate:"
			c.Redis = tc.r
			if ps := Validate(c); ps != nil {
				t.Fatalf("Validate = %v, want no problem", ps)
			}
			if got := tc.r.EffectiveMode(); got != tc.want {
				t.Errorf("EffectiveMode = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestRedisEffectiveModeUnset: a Redis built in code without a mode reads
// as auto.
func TestRedisEffectiveModeUnset(t *testing.T) {
	if got := (Redis{Addrs: []string{"a:1", "b:1"}}).EffectiveMode(); got != RedisModeCluster {
		t.Errorf("EffectiveMode = %s, want cluster", got)
	}
}

// TestRedisModeUnknownStaysQuiet: an unknown mode is one problem, not also
// the topology checks of a mode nobody asked for.
func TestRedisModeUnknownStaysQuiet(t *testing.T) {
	c := validConfig()
	c.Redis.Mode, c.Redis.MasterName, c.Redis.DB = "replicated", "m", 3
	ps := Validate(c)
	if len(ps) != 1 || !strings.HasPrefix(ps[0].String(), "redis.mode: invalid value") {
		t.Errorf("Validate = %v, want only the redis.mode problem", ps)
	}
}
