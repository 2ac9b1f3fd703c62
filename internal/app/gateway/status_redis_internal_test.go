package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/redisconn"
)

// TestStatusRedisTopology: the Redis section names the topology and, for
// sentinel, the primary; for a cluster, the primaries; with the changes
// seen, when the primary took over, and a failed look as a problem. The
// JSON carries the same.
func TestStatusRedisTopology(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	since, checked := now.Add(-90*time.Second), now.Add(-2*time.Second)
	for _, tc := range []struct {
		name     string
		top      redisconn.Topology
		rows     []string // "key: value" of the Redis table, after Configured
		json     string   // a fragment of status.json's redis member
		problems []string
	}{
		{"single", redisconn.Topology{Mode: "single", Addrs: []string{"redis-master:6379"}},
			[]string{"Topology: single"}, `"mode":"single"`, nil},
		{"sentinel", redisconn.Topology{Mode: "sentinel", Addrs: []string{"s0:26379", "s1:26379"}, MasterName: "mymaster",
			Primaries: []string{"10.0.0.7:6379"}, Since: since, Checked: checked, Changes: 1},
			[]string{"Topology: sentinel (master mymaster)", "Primary: 10.0.0.7:6379",
				"Primary changes: 1, primary since 2026-11-28 11:58:30 UTC (1m30s ago)",
				"Last look: 2026-11-28 11:59:58 UTC (2s ago)"},
			`"mode":"sentinel","master_name":"mymaster","primary":"10.0.0.7:6379","primary_since":"2026-11-28T11:58:30Z","primary_changes":1`, nil},
		{"cluster", redisconn.Topology{Mode: "cluster", Addrs: []string{"clustercfg:6379"},
			Primaries: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}, Since: since, Checked: checked},
			[]string{"Topology: cluster", "Primaries: 10.0.0.1:6379, 10.0.0.2:6379, 10.0.0.3:6379",
				"Primary changes: 0, primary since 2026-11-28 11:58:30 UTC (1m30s ago)"},
			`"primaries":["10.0.0.1:6379","10.0.0.2:6379","10.0.0.3:6379"]`, nil},
		{"sentinels unreachable", redisconn.Topology{Mode: "sentinel", Addrs: []string{"s0:26379"}, MasterName: "m",
			Error: "dial tcp 10.0.0.9:26379: connect: connection refused"},
			[]string{"Primary: -", "Last look: -; last look failed: dial tcp 10.0.0.9:26379: connect: connection refused"},
			`"topology_error":"dial tcp 10.0.0.9:26379: connect: connection refused"`,
			[]string{"Redis topology unknown: dial tcp 10.0.0.9:26379: connect: connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &Status{Now: now, Redis: redisStatus(tc.top)}
			st.Problems = problemsOf(st)
			var rows []string
			for _, s := range layout(st).Sections {
				if s.ID != "redis" {
					continue
				}
				for _, r := range s.Tables[0].Rows[1:] {
					rows = append(rows, r[0].Text+": "+r[1].Text)
				}
			}
			for _, want := range tc.rows {
				if !contains(rows, want) {
					t.Errorf("rows %q lack %q", rows, want)
				}
			}
			js, err := json.Marshal(st.Redis)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(js), tc.json) {
				t.Errorf("JSON %s lacks %s", js, tc.json)
			}
			for _, want := range tc.problems {
				if !contains(st.Problems, want) {
					t.Errorf("problems %q lack %q", st.Problems, want)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
