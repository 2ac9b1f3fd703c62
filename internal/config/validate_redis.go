package config

import "fmt"

// validateRedis checks redis, in file order: the addresses, and that mode,
// master_name and the sentinel credentials describe one topology
// (docs/deployment.md, Redis in production).
func (v *validator) validateRedis(r Redis) {
	modeOK := v.oneOf("redis.mode", r.Mode, RedisModeAuto, RedisModeSingle, RedisModeCluster, RedisModeSentinel)
	mode := r.EffectiveMode()
	if len(r.Addrs) == 0 {
		v.add("redis.addrs", "must list at least one address")
	} else if modeOK && mode == RedisModeSingle && len(r.Addrs) > 1 {
		v.add("redis.addrs", "redis.mode single takes one address, got %d", len(r.Addrs))
	}
	for i, a := range r.Addrs {
		p := fmt.Sprintf("redis.addrs[%d]", i)
		if _, _, ok := splitAddr(a, 1); !ok {
			v.add(p, "invalid address %s (want host:port, port 1-65535)", v.q(p, a))
		}
	}
	if modeOK {
		v.redisSentinel(r, mode)
	}
	v.envName("redis.sentinel_password_env", r.SentinelPasswordEnv)
	v.envName("redis.password_env", r.PasswordEnv)
	if r.DB < 0 {
		v.add("redis.db", "must not be negative, got %s", v.qint("redis.db", int64(r.DB)))
	} else if r.DB != 0 && modeOK && mode == RedisModeCluster {
		// Redis Cluster has only database 0: the setting would be
		// silently ignored.
		v.add("redis.db", "Redis Cluster (redis.mode cluster, or several addrs without master_name) has only database 0, got %s",
			v.qint("redis.db", int64(r.DB)))
	}
	if r.KeyPrefix == "" {
		v.add("redis.key_prefix", "must not be empty")
	}
	// A trust root without TLS would be ignored, and the operator who set
	// it believes the connection is verified.
	if r.CAFile != "" && !r.TLS {
		v.add("redis.ca_file", "only used with redis.tls: true")
	}
	v.file("redis.ca_file", r.CAFile)
}

// redisSentinel refuses a sentinel topology without the primary's name,
// and a master name or sentinel credentials that another mode would
// silently ignore.
func (v *validator) redisSentinel(r Redis, mode string) {
	switch {
	case mode == RedisModeSentinel && r.MasterName == "":
		v.add("redis.master_name", "required with redis.mode sentinel: the name the sentinels know the primary by")
	case mode != RedisModeSentinel && r.MasterName != "":
		v.add("redis.master_name", "set to %s, but redis.mode is %s: a master name is only for sentinel",
			v.q("redis.master_name", r.MasterName), v.q("redis.mode", r.Mode))
	}
	if mode == RedisModeSentinel {
		return
	}
	const why = "only used with sentinel (redis.mode sentinel, or master_name set)"
	if r.SentinelUsername != "" {
		v.add("redis.sentinel_username", why)
	}
	if r.SentinelPasswordEnv != "" {
		v.add("redis.sentinel_password_env", why)
	}
}
