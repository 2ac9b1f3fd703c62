package failover_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestRepointedAddress: the gateways know Redis by one address (a DNS name
// or a Kubernetes Service: a forwarder here) in front of the primary. The
// primary is demoted to a replica of the other node and the address
// repointed to it; the gateways' pooled connections still reach the
// demoted node, whose writes answer READONLY. Each such connection is
// closed after its READONLY, and the new ones reach the new primary.
func TestRepointedAddress(t *testing.T) {
	nodes := redistest.StartReplicated(t, 1, "data-pw")
	old, next := nodes[0], nodes[1]
	addr := redistest.Forward(t, old.Addr)
	r := &gatewaytest.Redis{Mode: "single", Addrs: []string{addr.Addr}, Password: "data-pw"}
	var promoted time.Time
	scenario(t, "single address repointed, READONLY", r, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// As Sentinel or a managed service fails over, without the CLIENT
		// KILL Sentinel adds: the open connections stay.
		if err := next.Client(t).ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		promoted = time.Now()
		if err := old.Client(t).ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(next.Port)).Err(); err != nil {
			t.Fatal(err)
		}
		addr.Repoint(next.Addr)
	}, func() time.Time { return promoted })
}
