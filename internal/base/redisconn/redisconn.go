// Package redisconn builds faxgate's one Redis connection from the redis
// section, for the topology it names (docs/deployment.md, Redis in
// production): a single node, a Redis Cluster (its nodes, or one
// configuration endpoint of a managed service), or a primary found through
// Sentinel. The token store, the rate limits, the budget, the holds and the
// ACME storage all receive the one client; none builds its own, so a
// gateway holds one pool and one set of timeouts whatever it shares.
//
// go-redis follows most of a failover by itself; Conn adds what it lacks
// (docs/deployment.md, What faxgate adds to go-redis): a cluster's slot map
// read again as soon as a command fails and every WatchEvery, where
// go-redis waits for a MOVED or for the map to be a minute old; and a view
// of the topology (the current primary, the changes seen) for the status
// page and faxgate_redis_primary_changes_total.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/config"
)

// DefaultWatchEvery is Options.WatchEvery when unset: how stale a view of
// the topology may get while no command fails.
const DefaultWatchEvery = 5 * time.Second

// Options are what a Conn takes beside the redis section; the zero value
// is production's.
type Options struct {
	// WatchEvery is how often Run reads the topology again (a cluster's slot
	// map, the primary the sentinels name). Default DefaultWatchEvery.
	WatchEvery time.Duration
	// Now is the clock of the times Topology reports. Default time.Now.
	Now func() time.Time
	// Logger receives a line for each change of primary. Default: none.
	Logger *zap.Logger
	// Metrics counts the changes of primary; nil counts nothing.
	Metrics *Metrics
	// Panics counts the panics recovered in Run (loop redis_topology); nil
	// counts nothing.
	Panics background.Counter
}

// Conn is faxgate's one Redis connection: the go-redis client every user
// shares, and the watch of its topology that Run keeps.
type Conn struct {
	client     redis.UniversalClient
	mode       string
	addrs      []string
	masterName string
	every      time.Duration
	now        func() time.Time
	log        *zap.Logger
	met        *Metrics
	panics     background.Counter
	sentinels  *sentinelWatch // mode sentinel
	conns      *connSet       // mode sentinel: every connection, to close those off the primary

	lookMu     sync.Mutex // one look at a time
	epoch      int64      // sentinel: the configuration epoch of the view recorded; under lookMu
	olderSince time.Time  // sentinel: since when only older views came; under lookMu

	mu   sync.Mutex
	view Topology
}

// New builds the connection of the redis section c (already validated)
// with the passwords pw; it does not contact Redis.
//
// Timeouts are short and retries few because every user of this client has
// a fallback (the token in memory, local rate limits): a slow Redis must
// cost milliseconds, not requests. ContextTimeoutEnabled lets each user's
// per-operation deadline reach the socket.
//
// With c.TLS every connection (to the node, the sentinels, every cluster
// node) is TLS, and the server's certificate is verified against the system
// roots plus c.CAFile. The error, which names redis.ca_file, is the CA file
// being unreadable or holding no certificate.
func New(c config.Redis, pw Passwords, o Options) (*Conn, error) {
	if o.WatchEvery <= 0 {
		o.WatchEvery = DefaultWatchEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	u := &redis.UniversalOptions{
		Addrs:            c.Addrs,
		MasterName:       c.MasterName,
		Username:         c.Username,
		Password:         pw.Data.v,
		SentinelUsername: c.SentinelUsername,
		SentinelPassword: pw.Sentinel.v,
		DB:               c.DB,
		ClientName:       "faxgate",

		DialTimeout:           2 * time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true, // per-operation deadlines reach the socket
		PoolTimeout:           2 * time.Second,
		PoolSize:              8,
		MaxIdleConns:          4,
		ConnMaxIdleTime:       5 * time.Minute,
		MaxRetries:            1,
		// A dial that fails is tried again twice, not five times: a node
		// that is gone must not hold a topology reload for seconds.
		DialerRetries: 2,

		// Maintenance notifications are a Redis Enterprise/Cloud feature; in
		// auto mode the client probes for them on every new connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if c.TLS {
		t, err := tlsConfig(c.CAFile)
		if err != nil {
			return nil, err
		}
		u.TLSConfig = t
	}
	cn := &Conn{mode: c.EffectiveMode(), addrs: append([]string(nil), c.Addrs...), masterName: c.MasterName,
		every: o.WatchEvery, now: o.Now, log: o.Logger, met: o.Metrics, panics: o.Panics}
	cn.view = Topology{Mode: cn.mode, Addrs: cn.addrs, MasterName: c.MasterName}
	switch cn.mode {
	case config.RedisModeCluster:
		co := u.Cluster()
		// A slot map older than this is read again by the next command
		// (go-redis's default is a minute); Run reads it that often even
		// without commands.
		co.ClusterStateReloadInterval = o.WatchEvery
		cc := redis.NewClusterClient(co)
		cc.AddHook(reloadOnFailure{cc})
		cn.client = cc
	case config.RedisModeSentinel:
		fc := redis.NewFailoverClient(u.Failover())
		cn.conns = newConnSet()
		fc.AddHook(cn.conns)
		cn.client = fc
		cn.sentinels = newSentinelWatch(u)
	default:
		cn.client = redis.NewClient(u.Simple())
	}
	return cn, nil
}

// Client is the go-redis client (*redis.Client, or *redis.ClusterClient
// with mode cluster) every user shares.
func (c *Conn) Client() redis.UniversalClient { return c.client }

// Mode is the topology in use: single, cluster or sentinel.
func (c *Conn) Mode() string { return c.mode }

// Close closes the client and the sentinel watch's connections.
func (c *Conn) Close() error {
	if c.sentinels != nil {
		c.sentinels.close()
	}
	return c.client.Close()
}

// Run watches the topology until ctx ends: every WatchEvery it reads a
// cluster's slot map again (so go-redis routes to a promoted replica even
// when no command failed) or asks the sentinels for the primary, and
// records what it saw for Topology. With sentinel it also listens for
// +switch-master, and on a new primary closes the client's connections to
// any other node (pub/sub ones included). A single node has nothing to
// watch: Run returns at once.
func (c *Conn) Run(ctx context.Context) {
	if c.mode == config.RedisModeSingle {
		return
	}
	if c.sentinels != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			background.Loop(ctx, c.log, c.panics, "redis_topology", func(ctx context.Context) bool {
				return sleep(ctx, c.every)
			}, func(ctx context.Context) {
				// A switch is news to read at once, with its epoch, like
				// any look: a look running meanwhile may still carry the
				// old view.
				c.sentinels.switches(ctx, c.masterName, func() { c.look(ctx) })
			})
		}()
	}
	background.Loop(ctx, c.log, c.panics, "redis_topology", func(ctx context.Context) bool {
		return sleep(ctx, c.every)
	}, func(ctx context.Context) {
		for {
			c.look(ctx)
			if !sleep(ctx, c.nextLook()) {
				return
			}
		}
	})
}

// settleFor is how long after a change of primary the watch looks every
// settleEvery: the sentinels learn of a failover one after the other, and
// a connection redialed through one that did not know yet is back on the
// old primary, to be closed again.
const (
	settleFor   = 5 * time.Second
	settleEvery = 200 * time.Millisecond
)

// olderViewsFor is how long the sentinels must name the primary with an
// older configuration epoch than the one recorded before their view is
// taken: far longer than a failover takes to reach every sentinel (their
// hello period is 2 s), so only a set of sentinels started afresh, whose
// epochs began again, gets there.
const olderViewsFor = 30 * time.Second

// takeView reports whether a sentinel view of epoch, seen at now, is to be
// recorded, and notes it; c.lookMu must be held. An older view than one
// already recorded comes from sentinels that have not heard of the
// failover yet, and is left out, unless older views alone have come for
// olderViewsFor.
func (c *Conn) takeView(epoch int64, now time.Time) bool {
	if epoch < c.epoch {
		if c.olderSince.IsZero() {
			c.olderSince = now
		}
		if now.Sub(c.olderSince) < olderViewsFor {
			return false
		}
	}
	c.epoch, c.olderSince = epoch, time.Time{}
	return true
}

// nextLook is how long to wait for the next look.
func (c *Conn) nextLook() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view.Changes > 0 && c.now().Sub(c.view.Since) < settleFor {
		return min(c.every, settleEvery)
	}
	return c.every
}

// look reads the topology once and records it. Looks run one at a time.
func (c *Conn) look(ctx context.Context) {
	c.lookMu.Lock()
	defer c.lookMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.every)
	defer cancel()
	var primaries []string
	var err error
	switch c.mode {
	case config.RedisModeCluster:
		cc := c.client.(*redis.ClusterClient)
		cc.ReloadState(ctx) // asynchronous; go-redis coalesces reloads
		primaries, err = clusterPrimaries(ctx, cc)
	case config.RedisModeSentinel:
		var p string
		var epoch int64
		if p, epoch, err = c.sentinels.primary(ctx, c.masterName); err == nil {
			if !c.takeView(epoch, c.now()) {
				return
			}
			primaries = []string{p}
		}
	}
	c.record(primaries, err)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// tlsConfig leaves ServerName empty on purpose: go-redis dials with
// tls.DialWithDialer, which takes it from each address's host, so every
// cluster node and sentinel is verified under its own name. One fixed name
// would be right for at most one of them.
func tlsConfig(caFile string) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return t, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("redis.ca_file: %w", err)
	}
	// An extra root, as upstream.ca_file is: a managed Redis with a public
	// certificate keeps working when a private CA is added.
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("redis.ca_file: no PEM certificate in %s", caFile)
	}
	t.RootCAs = pool
	return t, nil
}

// Logger sends go-redis's own log lines (failed dials, sentinel failovers),
// which it otherwise prints to stderr as plain text, to zap. The lines name
// addresses and errors, never commands' arguments.
type Logger struct{ L *zap.Logger }

// Printf implements go-redis's logging interface.
func (r Logger) Printf(_ context.Context, format string, v ...any) {
	r.L.Info("redis client", zap.String("detail", fmt.Sprintf(format, v...)))
}

// InstallProcessLogger routes go-redis's logging to l. go-redis has one
// process-wide logger and no per-client option, so only main calls this,
// once; packages and tests building gateways never do.
func InstallProcessLogger(l *zap.Logger) {
	redis.SetLogger(Logger{L: l})
}
