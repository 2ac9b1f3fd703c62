package gatewaytest

import (
	"fmt"
	"strings"
)

// Redis is the redis section of a test gateway (docs/configuration.md).
type Redis struct {
	// Mode is redis.mode; default auto.
	Mode string
	// Addrs are redis.addrs: the node, the cluster nodes or endpoint, or
	// the sentinels.
	Addrs []string
	// MasterName is redis.master_name.
	MasterName string
	// Password and SentinelPassword are the data nodes' and the sentinels'
	// passwords: the harness names variables holding them in
	// redis.password_env and sentinel_password_env.
	Password, SentinelPassword string
}

// yaml adds to the file y the token, rate_limit and redis settings of r:
// everything shared through r.
func (r *Redis) yaml(o Options, file string) string {
	file = inSection(file, "rate_limit", "  backend: redis\n")
	y := fmt.Sprintf("token:\n  store: redis\n  refresh_before: %s\nredis:\n", refreshBefore(o))
	if r.Mode != "" {
		y += fmt.Sprintf("  mode: %s\n", r.Mode)
	}
	y += "  addrs: ["
	for i, a := range r.Addrs {
		y += pick(i > 0, ", ", "") + fmt.Sprintf("%q", a)
	}
	y += "]\n"
	if r.MasterName != "" {
		y += fmt.Sprintf("  master_name: %q\n", r.MasterName)
	}
	if r.Password != "" {
		y += "  password_env: FG_TEST_REDIS_PASSWORD\n"
	}
	if r.SentinelPassword != "" {
		y += "  sentinel_password_env: FG_TEST_REDIS_SENTINEL_PASSWORD\n"
	}
	if file != "" && !strings.HasSuffix(file, "\n") {
		file += "\n"
	}
	return file + y
}

func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}
