package failover_test

import (
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestClusterPrimaryKilled: a cluster primary's process dies; after
// cluster-node-timeout its replica takes its slots over. The killed one
// holds the caller's rate-limit key, so the fleet's decisions depend on
// the failover. The gateways know the cluster by one address, as a
// managed service's configuration endpoint (the other nodes discovered).
func TestClusterPrimaryKilled(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, redistest.ClusterOptions{Password: "cluster-pw"})
	const key = "faxgate:rl:svc" // the rate limit of the caller "svc" (docs/callers-and-policy.md)
	old := cl.PrimaryFor(t, key)
	endpoint := cl.Nodes[0]
	if endpoint == old {
		endpoint = cl.Nodes[len(cl.Nodes)-1]
	}
	r := &gatewaytest.Redis{Mode: "cluster", Addrs: []string{endpoint.Addr}, Password: "cluster-pw"}
	scenario(t, "cluster, primary killed", r, old.Kill, func() time.Time {
		_, at := cl.WaitPromoted(t, old, redistest.Slot(key))
		return at
	})
}
