package tokencache

// The Redis-backed Shared store (token.store: redis).
//
// Layout in Redis, for an account whose API secret has the fingerprint fp
// (16 hex characters of HKDF-SHA256(secret, salt "faxgate", info "faxgate
// token-cache fingerprint v1")) and the configured redis.key_prefix P:
//
//	P{fp}:token    string: the shared token, sealed (below); TTL = the token's
//	               remaining lifetime, so Redis drops it when it expires
//	P{fp}:lease    string: the renewal lease; value = 32 random hex characters
//	               naming its owner; TTL = the lease's
//	P{fp}:updates  pub/sub channel: "1" is published whenever a token is saved
//
// e.g. faxgate:{a1b2c3d4e5f60718}:token. The braces are a Redis Cluster hash
// tag: one account's keys live in one slot, so on one node, and fail over
// together (a prefix holding braces of its own moves the tag but still keeps
// them together). The fingerprint keeps two accounts, or the old and new key
// during a rotation, apart in one Redis. Like any function of the secret it
// lets a reader of Redis test guesses offline, so it protects exactly as well
// as the secret is hard to guess (the upstream issues long random keys); it is
// derived under its own info string, so it gives nothing towards the sealing
// keys.
//
// The token value is id || nonce || AES-256-GCM(record), where id is 32 hex
// characters of HMAC-SHA256 of the token under a key derived from the secret
// (info "faxgate token-cache id v1"), the non-secret identity DeleteIf compares;
// the AEAD key is derived with info "faxgate token-cache aead v1"; the nonce is
// 12 random bytes; the additional data is the key name; the record is
// version(1) flags(1: bit 0 = by401) issued(8, Unix ns) expiry(8, Unix ns)
// token(rest). Nothing readable in Redis is a credential: without the API
// secret a value neither opens nor can be forged.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/redisconn"
)

// DefaultOpTimeout bounds each Redis operation when RedisOptions.OpTimeout is zero.
const DefaultOpTimeout = time.Second

// RedisOptions configures the Redis-backed Shared store.
type RedisOptions struct {
	// Client is the Redis connection (see internal/base/redisconn). Per-operation
	// deadlines reach the socket only when the client was built with
	// ContextTimeoutEnabled; otherwise its own read/write timeouts bound
	// each call.
	Client redis.UniversalClient
	// KeyPrefix is redis.key_prefix, e.g. "faxgate:".
	KeyPrefix string
	// Key returns the API secret. It is called on every operation, so a
	// rotated key takes effect at once; keys are derived once per distinct
	// secret.
	Key KeyFunc
	// Clock gives the time a saved token's remaining lifetime is counted from.
	Clock clock.Clock
	// OpTimeout bounds each Redis operation. Default DefaultOpTimeout: the
	// manager must never hang on Redis.
	OpTimeout time.Duration
	// OnError, when set, receives the errors of the background subscription
	// behind Updates (a *StoreError with Op "subscribe"), which has no caller
	// to return them to. It is called from that goroutine and must not block.
	OnError func(error)
	// SubscriptionIdle is how long a quiet update subscription waits before
	// checking its connection with PING; a PING unanswered for as long again
	// means the connection is dead. Default DefaultSubscriptionIdle.
	SubscriptionIdle time.Duration
	// Logger receives the log line of a panic recovered in the subscription
	// goroutine (with its stack). Default: none.
	Logger *zap.Logger
	// Panics counts the panics recovered in the subscription goroutine
	// (faxgate_background_panics_total); nil counts nothing.
	Panics background.Counter
}

// RedisStore shares one token between replicas through Redis.
type RedisStore struct {
	client  redis.UniversalClient
	prefix  string
	key     KeyFunc
	clock   clock.Clock
	timeout time.Duration
	onError func(error)
	subIdle time.Duration
	log     *zap.Logger
	panics  background.Counter

	acct atomic.Pointer[account] // keys of the most recent secret
}

var _ Shared = (*RedisStore)(nil)

// account is what one API secret is stored under.
type account struct {
	seal                  *sealer
	token, lease, channel string
}

// NewRedisStore builds the store; it does not contact Redis.
func NewRedisStore(o RedisOptions) *RedisStore {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.SubscriptionIdle <= 0 {
		o.SubscriptionIdle = DefaultSubscriptionIdle
	}
	return &RedisStore{
		client:  o.Client,
		prefix:  o.KeyPrefix,
		key:     o.Key,
		clock:   o.Clock,
		timeout: o.OpTimeout,
		onError: o.OnError,
		subIdle: o.SubscriptionIdle,
		log:     o.Logger,
		panics:  o.Panics,
	}
}

// StoreError is a failed store operation. Op is one of load, save, delete,
// lease, extend, release, subscribe (the op label of
// faxgate_token_store_errors_total). Err never holds key material, a token
// or a stored value.
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string { return "token store " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the cause, so errors.Is(err, context.DeadlineExceeded) works.
func (e *StoreError) Unwrap() error { return e.Err }

// OpOf returns the operation of a *StoreError in err's chain, or "".
func OpOf(err error) string {
	var se *StoreError
	if errors.As(err, &se) {
		return se.Op
	}
	return ""
}

// storeErr wraps err, with the arguments some Redis replies echo cut
// (redisconn.ScrubError): they would put a sealed value into a log line.
func storeErr(op string, err error) error {
	return &StoreError{Op: op, Err: redisconn.ScrubError(err)}
}

// account returns the keys of the current API secret, deriving them only
// when the secret differs from the last one seen.
func (s *RedisStore) account() (*account, error) {
	secret, err := s.key()
	if err != nil {
		return nil, err
	}
	if secret.IsZero() {
		return nil, errors.New("api key is empty")
	}
	if a := s.acct.Load(); a != nil && a.seal.secret.Equal(secret) {
		return a, nil
	}
	sl, err := newSealer(secret)
	if err != nil {
		return nil, fmt.Errorf("deriving token-cache keys: %w", err)
	}
	base := s.prefix + "{" + sl.fp + "}:"
	a := &account{seal: sl, token: base + "token", lease: base + "lease", channel: base + "updates"}
	s.acct.Store(a)
	return a, nil
}

// Load implements Shared. A value that does not open with the current secret
// (another account's, the old key's after a rotation, tampered, of another
// format version) or that has expired by this replica's clock is reported as
// absent: the manager then renews and overwrites it.
func (s *RedisStore) Load(ctx context.Context) (*Token, error) {
	a, err := s.account()
	if err != nil {
		return nil, storeErr("load", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	val, err := s.client.Get(ctx, a.token).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, storeErr("load", err)
	}
	tok, err := a.seal.open(val, a.token)
	if err != nil || !tok.Expiry.After(s.clock.Now()) {
		return nil, nil
	}
	return tok, nil
}

// saveScript writes the token unless one that lives longer is there, and
// tells the other replicas. KEYS[1] token key; ARGV value, PX, channel.
var saveScript = redis.NewScript(`
local pttl = redis.call('PTTL', KEYS[1])
if pttl > tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], '1')
return 1
`)

// Save implements Shared. The key's TTL is the token's remaining lifetime; a
// token already expired by this replica's clock is not written.
func (s *RedisStore) Save(ctx context.Context, tok *Token) (bool, error) {
	if tok == nil || tok.Value.IsZero() {
		return false, storeErr("save", errors.New("no token to save"))
	}
	a, err := s.account()
	if err != nil {
		return false, storeErr("save", err)
	}
	px := tok.Expiry.Sub(s.clock.Now()).Milliseconds()
	if px <= 0 {
		return false, nil
	}
	val, err := a.seal.seal(tok, a.token)
	if err != nil {
		return false, storeErr("save", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := saveScript.Run(ctx, s.client, []string{a.token}, val, px, a.channel).Int()
	if err != nil {
		return false, storeErr("save", err)
	}
	return n == 1, nil
}

// deleteScript deletes the token only if its id is ARGV[1].
var deleteScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, ` + fmt.Sprint(idLen) + `) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// DeleteIf implements Shared by comparing token ids inside Redis, so a 401
// for an old token never deletes a newer one saved in between.
func (s *RedisStore) DeleteIf(ctx context.Context, tok *Token) (bool, error) {
	if tok == nil {
		return false, nil
	}
	a, err := s.account()
	if err != nil {
		return false, storeErr("delete", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := deleteScript.Run(ctx, s.client, []string{a.token}, a.seal.id(tok)).Int()
	if err != nil {
		return false, storeErr("delete", err)
	}
	return n == 1, nil
}

// Lease implements Shared with the owner lease of internal/base/redisconn
// (SET NX PX with a random owner value).
func (s *RedisStore) Lease(ctx context.Context, ttl time.Duration) (Lease, bool, error) {
	a, err := s.account()
	if err != nil {
		return nil, false, storeErr("lease", err)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, false, storeErr("lease", err)
	}
	l := &redisLease{s: s, key: a.lease, owner: hex.EncodeToString(b[:])}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ok, err := redisconn.TakeLease(ctx, s.client, l.key, l.owner, ttl)
	if err != nil {
		return nil, false, storeErr("lease", err)
	}
	if !ok {
		return nil, false, nil
	}
	return l, true, nil
}

// redisLease is a lease taken by this replica. It keeps the key it took, so a
// key rotation while renewing does not make it touch another account's lease.
type redisLease struct {
	s     *RedisStore
	key   string
	owner string
}

// Extend implements Lease: only the owner's lease is extended. A lease that
// vanished from Redis (a failover that lost it) is taken back unless another
// replica holds it now, so the renewal in flight stays the fleet's only one.
func (l *redisLease) Extend(ctx context.Context, ttl time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.s.timeout)
	defer cancel()
	r, err := redisconn.RefreshLease(ctx, l.s.client, l.key, l.owner, ttl)
	if err != nil {
		return false, storeErr("extend", err)
	}
	return r != redisconn.LeaseLost, nil
}

// Release implements Lease: a lease that expired and was taken by another
// replica is left alone.
func (l *redisLease) Release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.s.timeout)
	defer cancel()
	if _, err := redisconn.ReleaseLease(ctx, l.s.client, l.key, l.owner); err != nil {
		return storeErr("release", err)
	}
	return nil
}
