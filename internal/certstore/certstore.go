// Package certstore is a certmagic.Storage over faxgate's one Redis
// connection (internal/base/redisconn), so that a fleet of replicas shares ACME
// accounts, certificates, keys and locks: one order per domain per fleet,
// and every replica serves what any of them obtained.
//
// Layout in Redis, for the configured redis.key_prefix P:
//
//	P certmagic/data/<key>    hash: v = the value, m = when it was stored
//	                          (Unix ns); one Redis key per certmagic key
//	P certmagic/locks/<name>  string: the random token of the lock's holder;
//	                          TTL = the holder's lease
//
// e.g. faxgate:certmagic/data/certificates/acme-v02/example.com/example.com.key.
// certmagic keys are slash-separated paths; directories exist only as the
// prefixes of stored keys, as in certmagic's FileStorage, whose semantics
// (List, Exists, Delete, Stat of a directory) this storage follows. Every
// operation touches a single Redis key, or walks keys with SCAN on every
// master, so it works alike on one node, through sentinel and on Redis
// Cluster, with or without hash tags in the prefix.
//
// Values (certificates, private keys, ACME account keys) are never logged
// and never put into an error: Redis errors that echo a command's arguments
// are cut before the arguments.
package certstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/redisconn"
)

// Defaults for Options' zero values.
const (
	// DefaultOpTimeout bounds each Redis operation (a List or a directory
	// Delete as a whole).
	DefaultOpTimeout = 5 * time.Second
	// DefaultLockTTL is the lease of a lock: how long a holder that died
	// keeps the others waiting. It is refreshed every third of it.
	DefaultLockTTL = 30 * time.Second
	// DefaultLockPoll is the pause between attempts of a Lock that waits.
	DefaultLockPoll = time.Second
)

// Options configures a Storage.
type Options struct {
	// Client is the Redis connection (internal/redisconn.New). It should be
	// built with ContextTimeoutEnabled, as redisconn's is, so that
	// OpTimeout reaches the socket.
	Client redis.UniversalClient
	// KeyPrefix is redis.key_prefix; keys live under KeyPrefix + "certmagic/".
	KeyPrefix string
	// Logger receives lock events (lease lost, refresh failing). Default: none.
	Logger *zap.Logger
	// Now gives the Modified time of stored keys. Default time.Now.
	Now func() time.Time
	// OpTimeout bounds each Redis operation. Default DefaultOpTimeout.
	OpTimeout time.Duration
	// LockTTL is a lock's lease. Default DefaultLockTTL.
	LockTTL time.Duration
	// LockPoll is the pause between attempts of a waiting Lock. Default
	// DefaultLockPoll.
	LockPoll time.Duration
}

// Storage is a certmagic.Storage in Redis. It also implements certmagic's
// optional TryLocker and LockLeaseRenewer. Use one Storage per process: the
// locks it holds are remembered in it, by name, as certmagic's Unlock(name)
// requires.
type Storage struct {
	client    redis.UniversalClient
	data      string // KeyPrefix + "certmagic/data/"
	locks     string // KeyPrefix + "certmagic/locks/"
	log       *zap.Logger
	now       func() time.Time
	opTimeout time.Duration
	lockTTL   time.Duration
	lockPoll  time.Duration

	mu   sync.Mutex
	held map[string]*heldLock // by lock name
}

var (
	_ certmagic.Storage          = (*Storage)(nil)
	_ certmagic.TryLocker        = (*Storage)(nil)
	_ certmagic.LockLeaseRenewer = (*Storage)(nil)
)

// New builds the storage; it does not contact Redis.
func New(o Options) *Storage {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.LockTTL <= 0 {
		o.LockTTL = DefaultLockTTL
	}
	if o.LockPoll <= 0 {
		o.LockPoll = DefaultLockPoll
	}
	return &Storage{
		client:    o.Client,
		data:      o.KeyPrefix + "certmagic/data/",
		locks:     o.KeyPrefix + "certmagic/locks/",
		log:       o.Logger,
		now:       o.Now,
		opTimeout: o.OpTimeout,
		lockTTL:   o.LockTTL,
		lockPoll:  o.LockPoll,
		held:      map[string]*heldLock{},
	}
}

// String names the storage in certmagic's log lines.
func (s *Storage) String() string { return "redis:" + s.data }

// clean turns a certmagic key into its canonical form: slash-separated,
// no leading or trailing slash, no "." or ".." elements (a key cannot
// climb out of the storage, as with FileStorage's filepath.Join), "" for
// the root.
func clean(key string) string {
	return strings.TrimPrefix(path.Clean("/"+key), "/")
}

// dataKey is the Redis key of a certmagic key (already clean).
func (s *Storage) dataKey(key string) string { return s.data + key }

// dirPrefix is the Redis key prefix of everything below a directory.
func (s *Storage) dirPrefix(dir string) string {
	if dir == "" {
		return s.data
	}
	return s.data + dir + "/"
}

func (s *Storage) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opTimeout)
}

// Store implements certmagic.Storage.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	k := clean(key)
	if k == "" {
		return errors.New("certstore: store: empty key")
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	// One HSET writes value and time together: a reader never sees one
	// without the other.
	err := s.client.HSet(ctx, s.dataKey(k), "v", value, "m", strconv.FormatInt(s.now().UnixNano(), 10)).Err()
	if err != nil {
		return opError("store", k, err)
	}
	return nil
}

// Load implements certmagic.Storage. A key that does not exist (a
// directory included) is an error for which errors.Is(err, fs.ErrNotExist)
// holds, which certmagic relies on.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	k := clean(key)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	b, err := s.client.HGet(ctx, s.dataKey(k), "v").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, notExist("load", k)
	}
	if err != nil {
		return nil, opError("load", k, err)
	}
	return b, nil
}

// Delete implements certmagic.Storage: the key and, when it is a directory,
// everything below it. A key that does not exist is not an error.
func (s *Storage) Delete(ctx context.Context, key string) error {
	k := clean(key)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var keys []string
	if k != "" {
		keys = append(keys, s.dataKey(k))
	}
	var mu sync.Mutex
	err := s.scan(ctx, s.dirPrefix(k), func(rk string) bool {
		mu.Lock()
		keys = append(keys, rk)
		mu.Unlock()
		return true
	})
	if err != nil {
		return opError("delete", k, err)
	}
	if len(keys) == 0 {
		return nil
	}
	// One DEL per key: in a cluster the keys live in different slots. A
	// pipeline sends them together (split by node by the cluster client).
	_, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, rk := range keys {
			p.Del(ctx, rk)
		}
		return nil
	})
	if err != nil {
		return opError("delete", k, err)
	}
	return nil
}

// Exists implements certmagic.Storage: true for a stored key and for a
// directory (the prefix of stored keys). A Redis error reports false, as
// the interface has no error to return.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	k := clean(key)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	if k != "" {
		n, err := s.client.Exists(ctx, s.dataKey(k)).Result()
		if err != nil {
			return false
		}
		if n > 0 {
			return true
		}
	}
	dir, err := s.isDir(ctx, k)
	return err == nil && dir
}

// isDir reports whether any key is stored below dir.
func (s *Storage) isDir(ctx context.Context, dir string) (bool, error) {
	var mu sync.Mutex
	found := false
	err := s.scan(ctx, s.dirPrefix(dir), func(string) bool {
		mu.Lock()
		found = true
		mu.Unlock()
		return false
	})
	return found, err
}

// List implements certmagic.Storage as FileStorage does: the children of
// dir (keys and directories) or, with recursive, everything below it,
// directories included, each as a full key, sorted. A dir that does not
// exist is an error for which errors.Is(err, fs.ErrNotExist) holds; a dir
// that is a stored key has no children.
func (s *Storage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	d := clean(dir)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	prefix := s.dirPrefix(d)
	var mu sync.Mutex
	set := map[string]bool{}
	err := s.scan(ctx, prefix, func(rk string) bool {
		rel := strings.TrimPrefix(rk, prefix)
		mu.Lock()
		defer mu.Unlock()
		if !recursive {
			first, _, _ := strings.Cut(rel, "/")
			set[path.Join(d, first)] = true
			return true
		}
		// Every directory on the way is listed too, as a walk lists it.
		for i := 0; i < len(rel); i++ {
			if rel[i] == '/' {
				set[path.Join(d, rel[:i])] = true
			}
		}
		set[path.Join(d, rel)] = true
		return true
	})
	if err != nil {
		return nil, opError("list", d, err)
	}
	if len(set) == 0 {
		if d == "" {
			return nil, notExist("list", d)
		}
		n, err := s.client.Exists(ctx, s.dataKey(d)).Result()
		if err != nil {
			return nil, opError("list", d, err)
		}
		if n == 0 {
			return nil, notExist("list", d)
		}
		return nil, nil
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, nil
}

// statScript returns the stored time and the value's length, or nil when
// the key does not exist; the value itself stays in Redis.
var statScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return {redis.call('HGET', KEYS[1], 'm'), redis.call('HSTRLEN', KEYS[1], 'v')}
`)

// Stat implements certmagic.Storage. A directory has IsTerminal false and
// no Modified time or Size.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	k := clean(key)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	if k != "" {
		res, err := statScript.Run(ctx, s.client, []string{s.dataKey(k)}).Slice()
		switch {
		case err == nil && len(res) == 2:
			info := certmagic.KeyInfo{Key: k, IsTerminal: true}
			if m, ok := res[0].(string); ok {
				if ns, err := strconv.ParseInt(m, 10, 64); err == nil {
					info.Modified = time.Unix(0, ns)
				}
			}
			if n, ok := res[1].(int64); ok {
				info.Size = n
			}
			return info, nil
		case err != nil && !errors.Is(err, redis.Nil):
			return certmagic.KeyInfo{}, opError("stat", k, err)
		}
	}
	dir, err := s.isDir(ctx, k)
	if err != nil {
		return certmagic.KeyInfo{}, opError("stat", k, err)
	}
	if !dir {
		return certmagic.KeyInfo{}, notExist("stat", k)
	}
	return certmagic.KeyInfo{Key: k, IsTerminal: false}, nil
}

// scan calls fn with every Redis key starting with prefix until fn returns
// false (redisconn.ScanPrefix: every master of a cluster, concurrently).
func (s *Storage) scan(ctx context.Context, prefix string, fn func(string) bool) error {
	return redisconn.ScanPrefix(ctx, s.client, prefix, fn)
}

// notExist is the error certmagic tests with errors.Is(err, fs.ErrNotExist).
func notExist(op, key string) error {
	return &fs.PathError{Op: "certstore " + op, Path: key, Err: fs.ErrNotExist}
}

// opError wraps a Redis error with the operation and the key (a key is a
// path such as certificates/<issuer>/<domain>/<domain>.key, never a value).
func opError(op, key string, err error) error {
	return fmt.Errorf("certstore %s %q: %w", op, key, redisconn.ScrubError(err))
}
