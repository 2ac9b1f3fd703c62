package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ScriptRuns is how many scripts the Redis behind rc has run to completion
// (EVAL and EVALSHA, less the EVALSHA calls that failed with NOSCRIPT before
// their EVAL): one per shared rate-limit or budget decision.
func ScriptRuns(t testing.TB, rc redis.UniversalClient) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	var n int64
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, _ := strings.Cut(line, ":")
		if name != "cmdstat_evalsha" && name != "cmdstat_eval" {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			x, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				n += x
			case "failed_calls": // NOSCRIPT, before EVAL
				n -= x
			}
		}
	}
	return n
}
