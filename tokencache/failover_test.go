package tokencache_test

import (
	"context"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/tokencache"
)

// What a Redis failover that loses the last writes does to the fleet
// (docs/tokens.md, Redis failover): the promoted replica holds the token
// the fleet had before (older), or none at all. Each replica's state is
// then its own token, newer than the store's. These tests replay that with
// the in-memory store; internal/testing/failover replays it on real Redis
// topologies.

// lostWrite puts the fleet of rs on a token newer than the one in sh, then
// makes sh forget it, as the promoted replica does: it holds old again, or
// nothing when old is nil. It returns the token the fleet holds.
func lostWrite(t *testing.T, sh *memShared, rs []replica, old *tokencache.Token, lifetime time.Duration) *tokencache.Token {
	t.Helper()
	newer := tokencache.NewToken(tokencache.NewSecret("renewed-before-the-failover"), time.Now(), lifetime, false)
	if _, err := sh.Save(context.Background(), newer); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		eventually.Eventually(t, 5*time.Second, "every replica on the newer token", func() bool {
			return r.m.Current() != nil && r.m.Current().Value.Equal(newer.Value)
		})
	}
	sh.mu.Lock()
	sh.tok = old
	sh.mu.Unlock()
	return newer
}

// TestFleet401AfterALostWrite: the store holds an older token (or none)
// than the one the fleet uses, and the upstream answers 401 to the fleet's
// token. No replica adopts the older stored token, which the upstream may
// have revoked with it: the fleet renews once, and every replica takes
// that new token.
func TestFleet401AfterALostWrite(t *testing.T) {
	for _, storeHolds := range []string{"an older token", "nothing"} {
		t.Run(storeHolds, func(t *testing.T) {
			sh, f := &memShared{}, &countingFetcher{lifetime: time.Hour}
			a := startReplica(t, sh, f, 10*time.Minute)
			b := startReplica(t, sh, f, 10*time.Minute)
			first := tokenOf(t, a.m)
			tokenOf(t, b.m)
			var old *tokencache.Token
			if storeHolds == "an older token" {
				old = first
			}
			rejected := lostWrite(t, sh, []replica{a, b}, old, time.Hour)
			before := f.calls.Load()

			// The upstream refuses the fleet's token on both replicas.
			if !a.m.Invalidate(rejected) {
				t.Fatal("Invalidate on the first replica: no resend")
			}
			got := tokenOf(t, a.m)
			// The second replica's request was sent with the same token; by
			// now it may hold the first replica's new one.
			if !b.m.Invalidate(rejected) {
				t.Fatal("Invalidate on the second replica: no resend")
			}
			gotB := tokenOf(t, b.m)
			for name, tok := range map[string]*tokencache.Token{"first": got, "second": gotB} {
				switch {
				case tok.Value.Equal(rejected.Value):
					t.Errorf("the %s replica kept the rejected token", name)
				case tok.Value.Equal(first.Value):
					t.Errorf("the %s replica adopted the older stored token", name)
				case !tok.Issued.After(rejected.Issued):
					t.Errorf("the %s replica holds a token issued %v, not after the rejected one's %v", name, tok.Issued, rejected.Issued)
				}
			}
			if !got.Value.Equal(gotB.Value) {
				t.Errorf("the replicas hold two tokens: the second renewed again instead of taking the first's")
			}
			if n := f.calls.Load() - before; n != 1 {
				t.Errorf("token calls after the 401 = %d, want 1 for the fleet", n)
			}
		})
	}
}

// TestFleetLostWriteCostsNoRenewal: after the store lost the fleet's
// token, nothing but the next scheduled renewal calls the token endpoint:
// a replica reading the store (an update notice after the subscription
// came back) keeps its own, newer token.
func TestFleetLostWriteCostsNoRenewal(t *testing.T) {
	sh, f := &memShared{}, &countingFetcher{lifetime: time.Hour}
	a := startReplica(t, sh, f, 10*time.Minute)
	b := startReplica(t, sh, f, 10*time.Minute)
	first := tokenOf(t, a.m)
	tokenOf(t, b.m)
	newer := lostWrite(t, sh, []replica{a, b}, first, time.Hour)
	before := f.calls.Load()
	// The notice a resubscription sends: the replicas read the store, which
	// holds the older token.
	sh.notify()
	eventually.Never(t, 300*time.Millisecond, "a replica leaving the newer token or renewing", func() bool {
		return !a.m.Current().Value.Equal(newer.Value) || !b.m.Current().Value.Equal(newer.Value) || f.calls.Load() != before
	})
}
