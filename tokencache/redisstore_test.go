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
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/testing/redistest"
	"github.com/faxgate/faxgate/tokencache"
	"github.com/redis/go-redis/v9"
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

// TestRedisStoreKeysShareASlot: one account's keys (token, lease, and the
// channel a script publishes on) carry the fingerprint as a Redis Cluster
// hash tag, so they sit in one slot, on one node, and fail over together;
// a prefix with braces of its own moves the tag but keeps them together.
func TestRedisStoreKeysShareASlot(t *testing.T) {
	secret := rsRandom(t, "key")
	fp := rsFingerprint(t, secret)
	for _, prefix := range []string{rsPrefix, "fax{gate}:", "{x"} {
		slots := map[int64]bool{}
		for _, k := range []string{"token", "lease", "updates"} {
			slots[redistest.Slot(prefix+"{"+fp+"}:"+k)] = true
		}
		if len(slots) != 1 {
			t.Errorf("prefix %q: the account's keys are in %d slots, want 1", prefix, len(slots))
		}
	}
}
