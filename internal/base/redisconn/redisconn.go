// Package redisconn builds faxgate's one Redis connection from the redis
// section. The token store (tokencache) and the shared rate limiter (policy)
// both receive it; neither builds its own, so a gateway holds one pool and
// one set of timeouts whatever it shares through Redis.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/config"
)

// New builds the client of the redis section: one address is a single node,
// several a cluster, and with master_name the addresses are sentinels.
// password is the value of the password_env variable (the caller resolves it
// through its injected getenv). Sentinels are contacted without credentials.
//
// Timeouts are short and retries few because every user of this client has a
// fallback (the token in memory, local rate limits): a slow Redis must cost
// milliseconds, not requests. ContextTimeoutEnabled lets each user's
// per-operation deadline reach the socket.
//
// With c.TLS every connection (to the node, the sentinels, every cluster
// node) is TLS, and the server's certificate is verified against the system
// roots plus c.CAFile. The error, which names redis.ca_file, is the CA file
// being unreadable or holding no certificate; New does not contact Redis.
func New(c config.Redis, password string) (redis.UniversalClient, error) {
	o := &redis.UniversalOptions{
		Addrs:      c.Addrs,
		MasterName: c.MasterName,
		Username:   c.Username,
		Password:   password,
		DB:         c.DB,
		ClientName: "faxgate",

		DialTimeout:           2 * time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true, // per-operation deadlines reach the socket
		PoolTimeout:           2 * time.Second,
		PoolSize:              8,
		MaxIdleConns:          4,
		ConnMaxIdleTime:       5 * time.Minute,
		MaxRetries:            1,

		// Maintenance notifications are a Redis Enterprise/Cloud feature; in
		// auto mode the client probes for them on every new connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if c.TLS {
		t, err := tlsConfig(c.CAFile)
		if err != nil {
			return nil, err
		}
		o.TLSConfig = t
	}
	return redis.NewUniversalClient(o), nil
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
