// Package redisconn builds faxgate's one Redis connection from the redis
// section. The token store (tokencache) and the shared rate limiter (policy)
// both receive it; neither builds its own, so a gateway holds one pool and
// one set of timeouts whatever it shares through Redis.
package redisconn

import (
	"context"
	"crypto/tls"
	"fmt"
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
func New(c config.Redis, password string) redis.UniversalClient {
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
		// ServerName is filled in per node from its address by crypto/tls.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return redis.NewUniversalClient(o)
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
