package tokencache_test

import (
	"context"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/tokencache"
)

const rsPrefix = "faxgate:"

// rsRandom returns a random token-like string; random so that finding it in
// Redis can only mean it was written there.
func rsRandom(t testing.TB, label string) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return label + "-" + base64.RawURLEncoding.EncodeToString(b)
}

// rsKey is a KeyFunc whose secret a test can rotate.
type rsKey struct{ v atomic.Value }

func newRSKey(s string) *rsKey {
	k := &rsKey{}
	k.set(s)
	return k
}
func (k *rsKey) set(s string) { k.v.Store(s) }
func (k *rsKey) fn() tokencache.KeyFunc {
	return func() (tokencache.Secret, error) { return tokencache.NewSecret(k.v.Load().(string)), nil }
}

func rsStore(c redis.UniversalClient, key tokencache.KeyFunc, mod ...func(*tokencache.RedisOptions)) *tokencache.RedisStore {
	o := tokencache.RedisOptions{Client: c, KeyPrefix: rsPrefix, Key: key, Clock: clock.Real{}}
	for _, m := range mod {
		m(&o)
	}
	return tokencache.NewRedisStore(o)
}

func rsToken(value string, issued time.Time, lifetime time.Duration, by401 bool) *tokencache.Token {
	return tokencache.NewToken(tokencache.NewSecret(value), issued, lifetime, by401)
}

// rsFingerprint computes the documented fingerprint independently of the
// code under test, pinning the key layout operators and other replicas rely on.
func rsFingerprint(t testing.TB, secret string) string {
	t.Helper()
	b, err := hkdf.Key(sha256.New, []byte(secret), []byte("faxgate"), "faxgate token-cache fingerprint v1", 8)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func rsTokenKey(t testing.TB, secret string) string {
	return rsPrefix + "{" + rsFingerprint(t, secret) + "}:token"
}

func rsCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sameToken(t *testing.T, got, want *tokencache.Token) {
	t.Helper()
	switch {
	case got == nil:
		t.Fatalf("got no token, want one")
	case !got.Value.Equal(want.Value):
		t.Errorf("token value differs from the one saved")
	case !got.Issued.Equal(want.Issued) || !got.Expiry.Equal(want.Expiry):
		t.Errorf("times = %v..%v, want %v..%v", got.Issued, got.Expiry, want.Issued, want.Expiry)
	case got.By401 != want.By401:
		t.Errorf("By401 = %v, want %v", got.By401, want.By401)
	case got.Header() != want.Header():
		t.Errorf("Header differs from the saved token's")
	}
}

func TestRedisStoreRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	st := rsStore(srv.Client(t), newRSKey(rsRandom(t, "key")).fn())

	if got, err := st.Load(ctx); got != nil || err != nil {
		t.Fatalf("Load on an empty Redis = %v, %v; want nil, nil", got, err)
	}
	for i, by401 := range []bool{false, true} {
		// Each token expires later than the last, so Save accepts it.
		tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Duration(i+1)*time.Hour, by401)
		ok, err := st.Save(ctx, tok)
		if !ok || err != nil {
			t.Fatalf("Save(by401=%v) = %v, %v; want true, nil", by401, ok, err)
		}
		got, err := st.Load(ctx)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		sameToken(t, got, tok)
	}
}

func TestRedisStoreTTLIsRemainingLifetime(t *testing.T) {
	tests := []struct {
		name     string
		age      time.Duration
		lifetime time.Duration
		want     time.Duration
	}{
		{"fresh", 0, time.Hour, time.Hour},
		{"ten minutes old", 10 * time.Minute, time.Hour, 50 * time.Minute},
		{"nearly expired", 24*time.Hour - 30*time.Second, 24 * time.Hour, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := rsCtx(t)
			secret := rsRandom(t, "key")
			raw := srv.Client(t)
			st := rsStore(raw, newRSKey(secret).fn())
			if ok, err := st.Save(ctx, rsToken(rsRandom(t, "tok"), time.Now().Add(-tt.age), tt.lifetime, false)); !ok || err != nil {
				t.Fatalf("Save = %v, %v", ok, err)
			}
			got, err := raw.PTTL(ctx, rsTokenKey(t, secret)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if d := got - tt.want; d > time.Second || d < -time.Second {
				t.Errorf("PTTL = %v, want %v ± 1s", got, tt.want)
			}
		})
	}
}

func TestRedisStoreSaveKeepsTheLaterExpiringToken(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	st := rsStore(srv.Client(t), newRSKey(rsRandom(t, "key")).fn())
	now := time.Now()
	long := rsToken(rsRandom(t, "long"), now, 2*time.Hour, false)
	short := rsToken(rsRandom(t, "short"), now, time.Hour, false)
	longer := rsToken(rsRandom(t, "longer"), now, 3*time.Hour, false)

	if ok, err := st.Save(ctx, long); !ok || err != nil {
		t.Fatalf("Save(long) = %v, %v; want true", ok, err)
	}
	if ok, err := st.Save(ctx, short); ok || err != nil {
		t.Fatalf("Save(short) over a later-expiring token = %v, %v; want false, nil", ok, err)
	}
	got, _ := st.Load(ctx)
	sameToken(t, got, long)
	if ok, err := st.Save(ctx, longer); !ok || err != nil {
		t.Fatalf("Save(longer) = %v, %v; want true", ok, err)
	}
	got, _ = st.Load(ctx)
	sameToken(t, got, longer)
}

func TestRedisStoreSaveExpiredTokenWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	st := rsStore(raw, newRSKey(rsRandom(t, "key")).fn())
	ok, err := st.Save(ctx, rsToken(rsRandom(t, "old"), time.Now().Add(-2*time.Hour), time.Hour, false))
	if ok || err != nil {
		t.Fatalf("Save(expired) = %v, %v; want false, nil", ok, err)
	}
	if n, _ := raw.DBSize(ctx).Result(); n != 0 {
		t.Errorf("DBSIZE = %d after saving an expired token, want 0", n)
	}
}

func TestRedisStoreKeyLayout(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	st := rsStore(raw, newRSKey(secret).fn())
	fp := rsFingerprint(t, secret)

	ps := raw.PSubscribe(ctx, "*")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	if ok, err := st.Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save = %v, %v", ok, err)
	}
	l, ok, err := st.Lease(ctx, time.Minute)
	if !ok || err != nil {
		t.Fatalf("Lease = %v, %v", ok, err)
	}
	defer l.Release(ctx)

	keys, err := raw.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"faxgate:{" + fp + "}:token": true, "faxgate:{" + fp + "}:lease": true}
	if len(keys) != len(want) || !want[keys[0]] || !want[keys[1]] {
		t.Errorf("keys = %q, want %v", keys, want)
	}
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wantCh := "faxgate:{" + fp + "}:updates"; msg.Channel != wantCh {
		t.Errorf("notification on %q, want %q", msg.Channel, wantCh)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(fp) {
		t.Errorf("fingerprint %q is not 16 hex characters", fp)
	}
}

func TestRedisStoreOtherSecretSeesNothing(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secretA, secretB := rsRandom(t, "keyA"), rsRandom(t, "keyB")
	a := rsStore(raw, newRSKey(secretA).fn())
	b := rsStore(raw, newRSKey(secretB).fn())
	tokA := rsToken(rsRandom(t, "tokA"), time.Now(), time.Hour, false)
	tokB := rsToken(rsRandom(t, "tokB"), time.Now(), time.Hour, false)

	if ok, err := a.Save(ctx, tokA); !ok || err != nil {
		t.Fatalf("a.Save = %v, %v", ok, err)
	}
	if got, err := b.Load(ctx); got != nil || err != nil {
		t.Fatalf("Load with another API secret = %v, %v; want nil, nil", got, err)
	}
	// Two accounts share one Redis: b's token does not displace a's.
	if ok, err := b.Save(ctx, tokB); !ok || err != nil {
		t.Fatalf("b.Save = %v, %v", ok, err)
	}
	if ka, kb := rsTokenKey(t, secretA), rsTokenKey(t, secretB); ka == kb {
		t.Fatalf("both secrets use key %q", ka)
	}
	if n, _ := raw.Exists(ctx, rsTokenKey(t, secretA), rsTokenKey(t, secretB)).Result(); n != 2 {
		t.Errorf("%d of the two accounts' keys exist, want 2", n)
	}
	gotA, _ := a.Load(ctx)
	sameToken(t, gotA, tokA)
	gotB, _ := b.Load(ctx)
	sameToken(t, gotB, tokB)

	t.Run("rotation on one store", func(t *testing.T) {
		k := newRSKey(secretA)
		st := rsStore(raw, k.fn())
		got, _ := st.Load(ctx)
		sameToken(t, got, tokA)
		k.set(rsRandom(t, "keyC"))
		if got, err := st.Load(ctx); got != nil || err != nil {
			t.Fatalf("Load after rotating the key = %v, %v; want nil, nil", got, err)
		}
		k.set(secretA)
		got, _ = st.Load(ctx)
		sameToken(t, got, tokA)
	})
}

// TestRedisStoreNothingReadableIsACredential reads everything the store
// writes, as anyone with access to Redis could.
func TestRedisStoreNothingReadableIsACredential(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	tokValue := rsRandom(t, "tok")
	st := rsStore(raw, newRSKey(secret).fn())
	if ok, err := st.Save(ctx, rsToken(tokValue, time.Now(), time.Hour, true)); !ok || err != nil {
		t.Fatalf("Save = %v, %v", ok, err)
	}
	l, ok, err := st.Lease(ctx, time.Minute)
	if !ok || err != nil {
		t.Fatalf("Lease = %v, %v", ok, err)
	}
	defer l.Release(ctx)

	var forbidden []string
	for _, s := range []string{secret, tokValue} {
		b := []byte(s)
		forbidden = append(forbidden, s,
			base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
			base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
			hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)))
		sum := sha256.Sum256(b) // a plain hash could be brute-forced
		forbidden = append(forbidden, hex.EncodeToString(sum[:8]), hex.EncodeToString(sum[:]))
	}

	var keys []string
	iter := raw.Scan(ctx, 0, rsPrefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("found %d keys under %q, want 2 (token and lease)", len(keys), rsPrefix)
	}
	for _, k := range keys {
		typ, err := raw.Type(ctx, k).Result()
		if err != nil || typ != "string" {
			t.Fatalf("TYPE %s = %q, %v; want string", k, typ, err)
		}
		v, err := raw.Get(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range forbidden {
			if strings.Contains(k, f) || strings.Contains(v, f) {
				t.Errorf("key %s or its value holds a form of the key or token", k)
			}
		}
		if strings.HasSuffix(k, ":token") && json.Valid([]byte(v)) {
			t.Errorf("the token value parses as JSON; it must be sealed")
		}
	}
}

func TestRedisStoreUnreadableValueIsAbsent(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(v, otherAccount, otherPrefix []byte) []byte
	}{
		{"flipped ciphertext byte", func(v, _, _ []byte) []byte { v[len(v)-1] ^= 1; return v }},
		{"flipped nonce byte", func(v, _, _ []byte) []byte { v[32] ^= 0x80; return v }},
		{"flipped id byte", func(v, _, _ []byte) []byte { v[0] ^= 1; return v }},
		{"truncated", func(v, _, _ []byte) []byte { return v[:40] }},
		{"empty", func(_, _, _ []byte) []byte { return nil }},
		{"plain JSON", func(_, _, _ []byte) []byte { return []byte(`{"token":"x","expiry":9999999999}`) }},
		{"other account's value copied over", func(_, o, _ []byte) []byte { return o }},
		// Same secret, another key_prefix: only the additional data (the key
		// name) tells the values apart.
		{"same account's value from another prefix", func(_, _, p []byte) []byte { return p }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := rsCtx(t)
			raw := srv.Client(t)
			secret, other := rsRandom(t, "key"), rsRandom(t, "other")
			st := rsStore(raw, newRSKey(secret).fn())
			if ok, err := st.Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
				t.Fatalf("Save = %v, %v", ok, err)
			}
			if ok, err := rsStore(raw, newRSKey(other).fn()).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
				t.Fatalf("Save(other) = %v, %v", ok, err)
			}
			otherPrefix := rsStore(raw, newRSKey(secret).fn(), func(o *tokencache.RedisOptions) { o.KeyPrefix = "elsewhere:" })
			if ok, err := otherPrefix.Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
				t.Fatalf("Save(other prefix) = %v, %v", ok, err)
			}
			p, err := raw.Get(ctx, "elsewhere:{"+rsFingerprint(t, secret)+"}:token").Bytes()
			if err != nil {
				t.Fatal(err)
			}
			key := rsTokenKey(t, secret)
			v, err := raw.Get(ctx, key).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			o, err := raw.Get(ctx, rsTokenKey(t, other)).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if err := raw.Set(ctx, key, tt.mutate(v, o, p), redis.KeepTTL).Err(); err != nil {
				t.Fatal(err)
			}
			if got, err := st.Load(ctx); got != nil || err != nil {
				t.Errorf("Load = %v, %v; want nil, nil", got, err)
			}
		})
	}
}

func TestRedisStoreDeleteIfOnlyTheSameToken(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	st := rsStore(srv.Client(t), newRSKey(rsRandom(t, "key")).fn())
	stale := rsToken(rsRandom(t, "stale"), time.Now(), time.Hour, false)
	newer := rsToken(rsRandom(t, "newer"), time.Now(), 2*time.Hour, false)

	if ok, err := st.DeleteIf(ctx, stale); ok || err != nil {
		t.Fatalf("DeleteIf on an empty store = %v, %v; want false, nil", ok, err)
	}
	if ok, err := st.Save(ctx, stale); !ok || err != nil {
		t.Fatalf("Save(stale) = %v, %v", ok, err)
	}
	if ok, err := st.Save(ctx, newer); !ok || err != nil {
		t.Fatalf("Save(newer) = %v, %v", ok, err)
	}
	// A late 401 for the stale token must not discard the newer one.
	if ok, err := st.DeleteIf(ctx, stale); ok || err != nil {
		t.Fatalf("DeleteIf(stale) = %v, %v; want false, nil", ok, err)
	}
	got, _ := st.Load(ctx)
	sameToken(t, got, newer)
	// A same-valued token built elsewhere (another replica's copy) matches.
	copyOfNewer := rsToken(newer.Value.Reveal(), newer.Issued, newer.Lifetime(), false)
	if ok, err := st.DeleteIf(ctx, copyOfNewer); !ok || err != nil {
		t.Fatalf("DeleteIf(newer) = %v, %v; want true, nil", ok, err)
	}
	if got, err := st.Load(ctx); got != nil || err != nil {
		t.Fatalf("Load after DeleteIf = %v, %v; want nil, nil", got, err)
	}
}

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

	// Extend keeps it past its first TTL.
	if ok, err := la.Extend(ctx, 5*time.Second); !ok || err != nil {
		t.Fatalf("Extend = %v, %v; want true, nil", ok, err)
	}
	time.Sleep(400 * time.Millisecond)
	if _, ok, _ := b.Lease(ctx, time.Minute); ok {
		t.Fatalf("Lease succeeded after the holder extended it")
	}
	if pttl, _ := raw.PTTL(ctx, leaseKey).Result(); pttl < 4*time.Second {
		t.Errorf("lease PTTL after Extend(5s) = %v, want > 4s", pttl)
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
	deadline := time.Now().Add(3 * time.Second)
	for {
		if lc, ok, err = a.Lease(ctx, time.Minute); ok || err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !ok || err != nil {
		t.Fatalf("Lease after expiry = %v, %v; want true, nil within 3s", ok, err)
	}
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

// rsUpdates subscribes st and waits until Redis has the subscription, so a
// test's next Save is not published into the void.
func rsUpdates(t *testing.T, raw *redis.Client, st *tokencache.RedisStore, wantPatterns int64) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := st.Updates(ctx)
	t.Cleanup(func() {
		cancel()
		// The channel is closed once ctx ends: no goroutine outlives the test.
		if !rsClosed(ch, 2*time.Second) {
			t.Errorf("Updates channel not closed within 2s of its context ending")
		}
	})
	deadline := time.Now().Add(3 * time.Second)
	for {
		n, err := raw.PubSubNumPat(context.Background()).Result()
		if err == nil && n >= wantPatterns {
			return ch
		}
		if time.Now().After(deadline) {
			t.Fatalf("Updates did not subscribe within 3s (NUMPAT = %d, %v)", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func rsSignalled(ch <-chan struct{}, d time.Duration) bool {
	select {
	case _, ok := <-ch:
		return ok
	case <-time.After(d):
		return false
	}
}

func rsClosed(ch <-chan struct{}, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func TestRedisStoreUpdates(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	key := newRSKey(secret)
	sub := rsStore(raw, key.fn())
	ch := rsUpdates(t, raw, sub, 1)
	if rsSignalled(ch, 100*time.Millisecond) {
		t.Fatalf("signal before anything was saved")
	}

	other := rsStore(raw, newRSKey(secret).fn())
	if ok, err := other.Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save = %v, %v", ok, err)
	}
	if !rsSignalled(ch, 2*time.Second) {
		t.Fatalf("no signal within 2s of another replica's Save")
	}

	// Another account under the same prefix is no news for this one.
	otherAccount := rsStore(raw, newRSKey(rsRandom(t, "otherkey")).fn())
	if ok, err := otherAccount.Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save(other account) = %v, %v", ok, err)
	}
	if rsSignalled(ch, 300*time.Millisecond) {
		t.Errorf("signal for another account's token")
	}

	// After a key rotation the subscription follows the new secret.
	newSecret := rsRandom(t, "rotated")
	key.set(newSecret)
	if ok, err := rsStore(raw, newRSKey(newSecret).fn()).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save(rotated) = %v, %v", ok, err)
	}
	if !rsSignalled(ch, 2*time.Second) {
		t.Errorf("no signal for the rotated key's token")
	}
}

func TestRedisStoreUpdatesPrefixIsLiteral(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	withPrefix := func(p string) func(*tokencache.RedisOptions) {
		return func(o *tokencache.RedisOptions) { o.KeyPrefix = p }
	}
	sub := rsStore(raw, newRSKey(secret).fn(), withPrefix("fax*[g]:"))
	ch := rsUpdates(t, raw, sub, 1)

	// "fax*[g]:" as a glob would match "faxXYg:"; as a prefix it must not.
	if ok, err := rsStore(raw, newRSKey(secret).fn(), withPrefix("faxXYg:")).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save = %v, %v", ok, err)
	}
	if rsSignalled(ch, 300*time.Millisecond) {
		t.Errorf("signal for a prefix the glob characters would match")
	}
	if ok, err := rsStore(raw, newRSKey(secret).fn(), withPrefix("fax*[g]:")).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save = %v, %v", ok, err)
	}
	if !rsSignalled(ch, 2*time.Second) {
		t.Errorf("no signal for the store's own prefix")
	}
}

// TestRedisStoreUpdatesSurviveRestart: messages published while the
// subscription is down are lost, so resubscribing must itself signal.
func TestRedisStoreUpdatesSurviveRestart(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	secret := rsRandom(t, "key")
	var errs sync.Map
	sub := rsStore(raw, newRSKey(secret).fn(), func(o *tokencache.RedisOptions) {
		o.OnError = func(err error) { errs.Store(tokencache.OpOf(err), err.Error()) }
	})
	ch := rsUpdates(t, raw, sub, 1)

	srv.Kill()
	time.Sleep(300 * time.Millisecond) // let the subscriber notice and fail at least once
	srv.Restart(t)
	if !rsSignalled(ch, 5*time.Second) {
		t.Fatalf("no signal within 5s of the subscription coming back")
	}
	msg, ok := errs.Load("subscribe")
	if !ok {
		t.Errorf("OnError got no subscribe error during the outage")
	} else if strings.Contains(msg.(string), secret) {
		t.Errorf("subscribe error holds the key")
	}

	if ok, err := rsStore(raw, newRSKey(secret).fn()).Save(ctx, rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)); !ok || err != nil {
		t.Fatalf("Save after restart = %v, %v", ok, err)
	}
	if !rsSignalled(ch, 2*time.Second) {
		t.Errorf("no signal for a Save after the restart")
	}
}

type rsOpResult struct {
	op  string
	err error
	d   time.Duration
}

// rsOps runs every store operation once, in a fixed order, returning each
// one's error and duration.
func rsOps(ctx context.Context, st *tokencache.RedisStore, l tokencache.Lease) []rsOpResult {
	tok := rsToken("tok-outage", time.Now(), time.Hour, false)
	ops := []struct {
		op string
		f  func() error
	}{
		{"save", func() error { _, err := st.Save(ctx, tok); return err }},
		{"load", func() error { _, err := st.Load(ctx); return err }},
		{"delete", func() error { _, err := st.DeleteIf(ctx, tok); return err }},
		{"lease", func() error { _, _, err := st.Lease(ctx, time.Minute); return err }},
		{"extend", func() error { _, err := l.Extend(ctx, time.Minute); return err }},
		{"release", func() error { return l.Release(ctx) }},
	}
	var out []rsOpResult
	for _, o := range ops {
		start := time.Now()
		err := o.f()
		out = append(out, rsOpResult{o.op, err, time.Since(start)})
	}
	return out
}

func TestRedisStoreOutageFailsFastAndRecovers(t *testing.T) {
	const opTimeout = 300 * time.Millisecond
	const slack = 500 * time.Millisecond
	secret := rsRandom(t, "key")

	for _, outage := range []string{"killed", "hung"} {
		t.Run(outage, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := rsCtx(t)
			// The production client, so its options are what is tested.
			c := newRedisconn(t, config.Redis{Addrs: []string{srv.Addr}}, "")
			t.Cleanup(func() { c.Close() })
			st := rsStore(c, newRSKey(secret).fn(), func(o *tokencache.RedisOptions) { o.OpTimeout = opTimeout })
			l, ok, err := st.Lease(ctx, time.Minute)
			if !ok || err != nil {
				t.Fatalf("Lease = %v, %v", ok, err)
			}

			if outage == "killed" {
				srv.Kill()
			} else {
				// A stopped process keeps its socket: connections are accepted
				// by the kernel and never answered, the worst case for a client.
				rsSignal(t, srv, syscall.SIGSTOP)
			}
			for _, r := range rsOps(ctx, st, l) {
				op := r.op
				if r.err == nil {
					t.Errorf("%s during the outage: no error", op)
					continue
				}
				if got := tokencache.OpOf(r.err); got != op {
					t.Errorf("OpOf(%s error) = %q", op, got)
				}
				if r.d > opTimeout+slack {
					t.Errorf("%s took %v, want at most %v", op, r.d, opTimeout+slack)
				}
				if strings.Contains(r.err.Error(), secret) || strings.Contains(r.err.Error(), "tok-outage") {
					t.Errorf("%s error holds the key or the token: %v", op, r.err)
				}
			}

			if outage == "killed" {
				srv.Restart(t)
			} else {
				rsSignal(t, srv, syscall.SIGCONT)
			}
			// The same client reconnects (after a restart, the data is gone and
			// the old lease with it). go-redis may need a moment: after as many
			// failed dials as its pool size it fails fast and redials in the
			// background once a second.
			var res []rsOpResult
			deadline := time.Now().Add(5 * time.Second)
			for {
				l2, _, _ := st.Lease(ctx, time.Minute)
				if l2 == nil {
					l2 = l
				}
				res = rsOps(ctx, st, l2)
				failed := false
				for _, r := range res {
					failed = failed || r.err != nil
				}
				if !failed || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			for _, r := range res {
				if r.err != nil {
					t.Errorf("%s after recovery: %v", r.op, r.err)
				}
			}
			tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)
			if ok, err := st.Save(ctx, tok); !ok || err != nil {
				t.Fatalf("Save after recovery = %v, %v", ok, err)
			}
			got, err := st.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sameToken(t, got, tok)
		})
	}
}

func rsSignal(t *testing.T, srv *redistest.Server, sig syscall.Signal) {
	t.Helper()
	if err := srv.Signal(sig); err != nil {
		t.Fatalf("signalling redis-server: %v", err)
	}
}

func TestRedisStoreKeyErrorIsAStoreError(t *testing.T) {
	errKey := errors.New("reading api key file: permission denied")
	st := rsStore(nil, func() (tokencache.Secret, error) { return tokencache.Secret{}, errKey })
	ctx := rsCtx(t)
	_, err := st.Load(ctx)
	if tokencache.OpOf(err) != "load" || !errors.Is(err, errKey) {
		t.Errorf("Load with a failing key = %v; want a load StoreError wrapping the key error", err)
	}
	_, err = st.Save(ctx, rsToken("x", time.Now(), time.Hour, false))
	if tokencache.OpOf(err) != "save" || !errors.Is(err, errKey) {
		t.Errorf("Save with a failing key = %v", err)
	}
	_, _, err = st.Lease(ctx, time.Minute)
	if tokencache.OpOf(err) != "lease" {
		t.Errorf("Lease with a failing key = %v", err)
	}
	if got := tokencache.OpOf(errKey); got != "" {
		t.Errorf("OpOf(plain error) = %q, want empty", got)
	}
}

func TestRedisStoreConcurrentUseWithRotation(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	raw := srv.Client(t)
	k := newRSKey(rsRandom(t, "key1"))
	st := rsStore(raw, k.fn())
	secrets := []string{rsRandom(t, "key1"), rsRandom(t, "key2")}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				if i == 0 && j%5 == 0 {
					k.set(secrets[j%2])
				}
				tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Hour+time.Duration(j)*time.Second, false)
				if _, err := st.Save(ctx, tok); err != nil {
					t.Errorf("Save: %v", err)
					return
				}
				if _, err := st.Load(ctx); err != nil {
					t.Errorf("Load: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestNewRedisClientPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret-pw")
	ctx := rsCtx(t)
	good := newRedisconn(t, config.Redis{Addrs: []string{srv.Addr}}, "s3cret-pw")
	defer good.Close()
	if err := good.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with the password: %v", err)
	}
	bad := newRedisconn(t, config.Redis{Addrs: []string{srv.Addr}}, "wrong-pw")
	defer bad.Close()
	st := rsStore(bad, newRSKey(rsRandom(t, "key")).fn())
	_, err := st.Load(ctx)
	if err == nil {
		t.Fatalf("Load with a wrong password: no error")
	}
	if strings.Contains(err.Error(), "wrong-pw") {
		t.Errorf("error holds the password: %v", err)
	}
}

func TestRedisStoreThroughSentinel(t *testing.T) {
	master, sentinelAddr, name := redistest.StartSentinel(t)
	ctx := rsCtx(t)
	c := newRedisconn(t, config.Redis{Addrs: []string{sentinelAddr}, MasterName: name}, "")
	defer c.Close()
	secret := rsRandom(t, "key")
	st := rsStore(c, newRSKey(secret).fn())
	tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)
	if ok, err := st.Save(ctx, tok); !ok || err != nil {
		t.Fatalf("Save through sentinel = %v, %v", ok, err)
	}
	got, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameToken(t, got, tok)
	if n, err := master.Client(t).Exists(ctx, rsTokenKey(t, secret)).Result(); n != 1 || err != nil {
		t.Errorf("token key on the master: EXISTS = %d, %v; want 1", n, err)
	}
}

// TestRedisStoreOverTLS: the token store works through the client faxgate
// builds for redis.tls with redis.ca_file, against a TLS-only redis-server.
func TestRedisStoreOverTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	srv := redistest.StartTLS(t, files)
	ctx := rsCtx(t)
	c := newRedisconn(t, config.Redis{Addrs: []string{srv.Addr}, TLS: true, CAFile: files.CAFile}, "")
	defer c.Close()
	secret := rsRandom(t, "key")
	st := rsStore(c, newRSKey(secret).fn())
	tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)
	if ok, err := st.Save(ctx, tok); !ok || err != nil {
		t.Fatalf("Save over TLS = %v, %v", ok, err)
	}
	got, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameToken(t, got, tok)
	if n, err := srv.Client(t).Exists(ctx, rsTokenKey(t, secret)).Result(); n != 1 || err != nil {
		t.Errorf("token key on the server: EXISTS = %d, %v; want 1", n, err)
	}
}

// TestRedisStoreCluster proves the hash-tag layout: the Lua scripts touch one
// key each, but token and lease must share a slot for operators' tooling and
// future multi-key scripts. Needs redis-cli (fails without it when CI=true).
func TestRedisStoreCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	ctx := rsCtx(t)
	c := newRedisconn(t, config.Redis{Addrs: addrs}, "")
	defer c.Close()
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("redisconn.New with %d addrs = %T, want *redis.ClusterClient", len(addrs), c)
	}
	secret := rsRandom(t, "key")
	st := rsStore(c, newRSKey(secret).fn())
	sub := rsStore(c, newRSKey(secret).fn())
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := sub.Updates(uctx)

	fp := rsFingerprint(t, secret)
	slots := map[int64]bool{}
	for _, k := range []string{rsPrefix + "{" + fp + "}:token", rsPrefix + "{" + fp + "}:lease"} {
		s, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[s] = true
	}
	if len(slots) != 1 {
		t.Errorf("token and lease keys are in %d slots, want 1", len(slots))
	}

	l, ok, err := st.Lease(ctx, time.Minute)
	if !ok || err != nil {
		t.Fatalf("Lease = %v, %v", ok, err)
	}
	if ok, err := l.Extend(ctx, time.Minute); !ok || err != nil {
		t.Errorf("Extend = %v, %v", ok, err)
	}
	// The subscription lands on a random node; classic PUBLISH reaches all
	// of them. Save until one is seen, since the subscription may not be up yet.
	tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)
	signalled := false
	for i := 0; i < 20 && !signalled; i++ {
		tok = rsToken(tok.Value.Reveal(), tok.Issued, tok.Lifetime()+time.Second, false)
		if ok, err := st.Save(ctx, tok); !ok || err != nil {
			t.Fatalf("Save = %v, %v", ok, err)
		}
		signalled = rsSignalled(ch, 200*time.Millisecond)
	}
	if !signalled {
		t.Errorf("no update signal in cluster mode")
	}
	got, err := sub.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameToken(t, got, tok)
	if ok, err := st.DeleteIf(ctx, tok); !ok || err != nil {
		t.Errorf("DeleteIf = %v, %v", ok, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// TestUpdatesSurviveAPanic: a panic in the subscription goroutine (here the
// key function, once, while a notification is judged) is logged with its
// stack and counted as a subscribe error; the subscription comes back, says
// so with a signal (notices may have been lost), and keeps signalling.
func TestUpdatesSurviveAPanic(t *testing.T) {
	srv := redistest.Start(t)
	ctx := rsCtx(t)
	c := newRedisconn(t, config.Redis{Addrs: []string{srv.Addr}}, "")
	t.Cleanup(func() { c.Close() })
	secret := rsRandom(t, "key")
	var armed atomic.Bool
	panicky := func() (tokencache.Secret, error) {
		if armed.CompareAndSwap(true, false) {
			panic("injected key failure")
		}
		return tokencache.NewSecret(secret), nil
	}
	core, logs := observer.New(zap.InfoLevel)
	var subErrs atomic.Int32
	sub := rsStore(c, panicky, func(o *tokencache.RedisOptions) {
		o.Logger = zap.New(core)
		o.OnError = func(error) { subErrs.Add(1) }
	})
	pub := rsStore(c, newRSKey(secret).fn())
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := sub.Updates(uctx)

	save := func() {
		t.Helper()
		tok := rsToken(rsRandom(t, "tok"), time.Now(), time.Hour, false)
		if ok, err := pub.Save(ctx, tok); !ok || err != nil {
			t.Fatalf("Save = %v, %v", ok, err)
		}
	}
	// Until the subscription is up, a save may go unseen.
	signalled := false
	for i := 0; i < 20 && !signalled; i++ {
		save()
		signalled = rsSignalled(ch, 200*time.Millisecond)
	}
	if !signalled {
		t.Fatal("no update signal before the panic")
	}
	armed.Store(true)
	save()
	// The panicked subscription pauses, resubscribes and signals.
	if !rsSignalled(ch, 5*time.Second) {
		t.Fatal("no signal after the panic: the subscription died")
	}
	if got := logs.FilterMessage(background.Msg).All(); len(got) != 1 || got[0].ContextMap()["loop"] != "token_updates" {
		t.Fatalf("panic lines %v, want one for loop token_updates", got)
	}
	if subErrs.Load() < 1 {
		t.Errorf("the panic was not reported through OnError")
	}
	save()
	if !rsSignalled(ch, 5*time.Second) {
		t.Fatal("no signal for a save after the recovery")
	}
}

// newRedisconn is redisconn.New for a configuration that has no CA file to
// fail on.
func newRedisconn(t testing.TB, c config.Redis, password string) redis.UniversalClient {
	t.Helper()
	rc, err := redisconn.New(c, password)
	if err != nil {
		t.Fatalf("redisconn.New: %v", err)
	}
	return rc
}
