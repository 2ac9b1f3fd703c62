package tokencache_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/tokencache"
)

func TestRedisStoreLease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	a := rsStore(raw, newRSKey(secret).fn())
	b := rsStore(raw, newRSKey(secret).fn())
	leaseKey := rsPrefix + "{" + rsFingerprint(t, secret) + "}:lease"

	la, ok, err := a.Lease(ctx, 300*time.Millisecond)
	if !ok || err != nil {
		t.Fatalf("first Lease = %v, %v; want true, nil", ok, err)
	}
	if _, ok, err := b.Lease(ctx, time.Minute); ok || err != nil {
		t.Fatalf("second Lease while held = %v, %v; want false, nil", ok, err)
	}

	// Extend keeps it past its first TTL: its time to live is the new one.
	if ok, err := la.Extend(ctx, 5*time.Second); !ok || err != nil {
		t.Fatalf("Extend = %v, %v; want true, nil", ok, err)
	}
	if pttl, _ := raw.PTTL(ctx, leaseKey).Result(); pttl < 4*time.Second {
		t.Errorf("lease PTTL after Extend(5s) = %v, want > 4s", pttl)
	}
	if _, ok, _ := b.Lease(ctx, time.Minute); ok {
		t.Fatalf("Lease succeeded after the holder extended it")
	}

	if err := la.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lb, ok, err := b.Lease(ctx, 200*time.Millisecond)
	if !ok || err != nil {
		t.Fatalf("Lease after Release = %v, %v; want true, nil", ok, err)
	}

	// Expiry frees it; the old holder's lease value can then neither extend
	// nor release the new holder's lease.
	var lc tokencache.Lease
	eventually.EventuallyErr(t, 3*time.Second, "the lease free once its TTL passed", func() error {
		l, ok, err := a.Lease(ctx, time.Minute)
		if err != nil || !ok {
			return fmt.Errorf("Lease = %v, %v", ok, err)
		}
		lc = l
		return nil
	})
	if ok, err := lb.Extend(ctx, time.Minute); ok || err != nil {
		t.Errorf("Extend by a former holder = %v, %v; want false, nil", ok, err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("Release by a former holder: %v", err)
	}
	if _, ok, _ := b.Lease(ctx, time.Minute); ok {
		t.Errorf("a former holder's Release freed the current holder's lease")
	}
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRedisStoreLeaseSurvivesItsLoss: a failover (or a restart without
// persistence) can lose the lease key while its holder renews. The
// holder's next Extend takes it back, so no second replica renews
// meanwhile; had another replica taken it first, Extend says it is lost.
func TestRedisStoreLeaseSurvivesItsLoss(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	a := rsStore(raw, newRSKey(secret).fn())
	b := rsStore(raw, newRSKey(secret).fn())
	leaseKey := rsPrefix + "{" + rsFingerprint(t, secret) + "}:lease"

	la, ok, err := a.Lease(ctx, time.Minute)
	if !ok || err != nil {
		t.Fatalf("Lease = %v, %v", ok, err)
	}
	if err := raw.Del(ctx, leaseKey).Err(); err != nil { // what the failover lost
		t.Fatal(err)
	}
	if ok, err := la.Extend(ctx, time.Minute); !ok || err != nil {
		t.Fatalf("Extend after the key vanished = %v, %v; want true (taken back), nil", ok, err)
	}
	if _, ok, _ := b.Lease(ctx, time.Minute); ok {
		t.Fatalf("another replica took the lease its holder had taken back")
	}

	if err := raw.Del(ctx, leaseKey).Err(); err != nil {
		t.Fatal(err)
	}
	lb, ok, err := b.Lease(ctx, time.Minute)
	if !ok || err != nil {
		t.Fatalf("Lease by another replica after the loss = %v, %v", ok, err)
	}
	if ok, err := la.Extend(ctx, time.Minute); ok || err != nil {
		t.Errorf("Extend once another replica holds it = %v, %v; want false, nil", ok, err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
