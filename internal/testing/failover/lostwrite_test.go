package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/tokencache"
)

// TestFailoverLosesTheLastWrites: replication is asynchronous, so a
// failover can lose what the primary took last. Here the replication
// stream is cut (a partition) while the vendor revokes the fleet's token
// and the fleet renews (token, lease and notice written to the primary
// only), then the primary dies and a replica that never saw the new token
// is promoted: the store holds the old, revoked token again. The fleet
// keeps its new token and renews nothing; when the vendor then refuses
// that one too, no replica takes the older stored token back: the fleet
// renews once more and every caller's request is answered 200.
func TestFailoverLosesTheLastWrites(t *testing.T) {
	s, r := sentinels(t, redistest.SentinelOptions{Links: true})
	// Tokens of 40 s: one renewed because of a 401 may be renewed again
	// because of one after 4 s (docs/tokens.md), and none is due for its
	// scheduled renewal (at 32 s less jitter) before the test ends.
	f := startFleet(t, r, 40*time.Second)
	tr := f.drive(2)
	f.healthy(t, "before the failover")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := s.Primary(t)
	tokenKey := func(node *redistest.Server) string {
		keys, err := node.Client(t).Keys(ctx, "faxgate:{*}:token").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("token keys on %s: %q, %v; want one", node.Addr, keys, err)
		}
		return node.Client(t).Get(ctx, keys[0]).Val()
	}
	before := tokenKey(old)
	first := f.gws[0].Tokens.Current()

	// The replication stream cut: what follows reaches the primary only.
	for _, l := range s.Links {
		l.Drop(true)
	}
	auth := f.sim.AuthCalls()
	f.sim.RevokeTokens()
	var renewed *tokencache.Token
	eventually.Eventually(t, 2*time.Second, "the fleet on a token renewed after the revocation", func() bool {
		renewed = f.gws[0].Tokens.Current()
		for _, g := range f.gws {
			if c := g.Tokens.Current(); c == nil || c.Value.Equal(first.Value) || !c.Value.Equal(renewed.Value) {
				return false
			}
		}
		return true
	})
	if n := f.sim.AuthCalls() - auth; n != 1 {
		t.Fatalf("token calls for the revocation = %d, want 1", n)
	}
	start := time.Now()
	old.Kill()
	next, promoted := s.WaitNewPrimary(t, old)
	t.Logf("promoted %s %v after the kill", next.Addr, promoted.Sub(start).Round(time.Millisecond))
	if got := tokenKey(next); got != before {
		t.Fatal("the promoted replica holds the renewed token: the test lost nothing")
	}

	// The failover alone costs no renewal: the fleet keeps the newer token
	// over the store's older one.
	auth = f.sim.AuthCalls()
	watch := f.watchFallbacks()
	watch.settled(t, promoted, 3*time.Second)
	for i, g := range f.gws {
		if c := g.Tokens.Current(); !c.Value.Equal(renewed.Value) {
			t.Errorf("gateway %d left the renewed token after the failover", i)
		}
	}
	authAfter := f.sim.AuthCalls() - auth
	if authAfter != 0 {
		t.Errorf("token calls after a failover that lost the renewed token = %d, want 0", authAfter)
	}

	// The vendor refuses the fleet's token: the store's is older and
	// revoked too. One renewal, and no caller sees the 401.
	f.revokeRenewsOnce(t)
	sent, failed, slowest := tr.finish(t)
	st := f.tokensIssued(t)
	t.Logf("RESULT failover losing the last writes (sentinel, primary killed): promoted %v after the kill; "+
		"%d requests, %d failed, slowest %v; %d token calls after the failover, then 1 for a revocation; tokens presented %+v",
		promoted.Sub(start).Round(time.Millisecond), sent, failed, slowest.Round(time.Millisecond), authAfter, st)
}
