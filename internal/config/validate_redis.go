package config

import "fmt"

// validateRedis checks redis.
func (v *validator) validateRedis(r Redis) {
	if len(r.Addrs) == 0 {
		v.add("redis.addrs", "must list at least one address")
	}
	for i, a := range r.Addrs {
		p := fmt.Sprintf("redis.addrs[%d]", i)
		if _, _, ok := splitAddr(a, 1); !ok {
			v.add(p, "invalid address %s (want host:port, port 1-65535)", v.q(p, a))
		}
	}
	v.envName("redis.password_env", r.PasswordEnv)
	if r.DB < 0 {
		v.add("redis.db", "must not be negative, got %s", v.qint("redis.db", int64(r.DB)))
	} else if r.DB != 0 && len(r.Addrs) > 1 && r.MasterName == "" {
		// Several addresses without master_name is Redis Cluster, which has
		// only database 0: the setting would be silently ignored.
		v.add("redis.db", "Redis Cluster (several addrs, no master_name) has only database 0, got %s", v.qint("redis.db", int64(r.DB)))
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
