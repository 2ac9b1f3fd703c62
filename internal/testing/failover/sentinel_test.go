package failover_test

import (
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// sentinels is the production shape with passwords on the data nodes and
// on the sentinels, as Bitnami's chart installs it (there both are one
// password; here they differ, so each is proven to be used).
func sentinels(t *testing.T, o redistest.SentinelOptions) (*redistest.Sentinels, *gatewaytest.Redis) {
	o.Password, o.SentinelPassword = "data-pw", "sentinel-pw"
	s := redistest.StartSentinels(t, o)
	return s, &gatewaytest.Redis{Mode: "sentinel", Addrs: s.SentinelAddrs(), MasterName: s.MasterName,
		Password: o.Password, SentinelPassword: o.SentinelPassword}
}

// TestSentinelFailover: SENTINEL FAILOVER, the planned failover (an
// upgrade, a node drain): the primary is demoted to a replica of the best
// replica.
func TestSentinelFailover(t *testing.T) {
	s, r := sentinels(t, redistest.SentinelOptions{})
	old := s.Primary(t)
	var next *redistest.Server
	scenario(t, "sentinel, SENTINEL FAILOVER", r, func() { s.Failover(t) }, func() time.Time {
		var at time.Time
		next, at = s.WaitNewPrimary(t, old)
		return at
	})
	_ = next
}

// TestSentinelPrimaryKilled: the primary's process dies (a node lost, an
// OOM kill); the sentinels agree it is down and promote a replica.
func TestSentinelPrimaryKilled(t *testing.T) {
	s, r := sentinels(t, redistest.SentinelOptions{})
	old := s.Primary(t)
	scenario(t, "sentinel, primary killed", r, old.Kill, func() time.Time {
		_, at := s.WaitNewPrimary(t, old)
		return at
	})
}
