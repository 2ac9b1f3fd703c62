package redisconn_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// TestTLS: against a TLS-only redis-server, the client of redis.tls with
// redis.ca_file naming the server's CA connects and round-trips; with
// another CA, or with only the system roots, the handshake fails the
// certificate check; without redis.tls nothing is served at all.
func TestTLS(t *testing.T) {
	t.Parallel() // own servers; mostly waiting on them
	files := redistest.NewTLSFiles(t)
	other := redistest.NewTLSFiles(t)
	srv := redistest.StartTLS(t, files)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	right := mustNew(t, config.Redis{Addrs: []string{srv.Addr}, TLS: true, CAFile: files.CAFile}, "")
	defer right.Close()
	if err := right.Set(ctx, "over-tls", "v", 0).Err(); err != nil {
		t.Fatalf("SET with the right CA: %v", err)
	}
	if got, err := right.Get(ctx, "over-tls").Result(); err != nil || got != "v" {
		t.Errorf("GET with the right CA = %q, %v; want v", got, err)
	}

	for name, c := range map[string]config.Redis{
		"wrong CA":     {Addrs: []string{srv.Addr}, TLS: true, CAFile: other.CAFile},
		"system roots": {Addrs: []string{srv.Addr}, TLS: true},
	} {
		t.Run(name, func(t *testing.T) {
			rc := mustNew(t, c, "")
			defer rc.Close()
			err := rc.Ping(ctx).Err()
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("PING = %v, want a certificate verification error", err)
			}
		})
	}
	t.Run("plain client", func(t *testing.T) {
		rc := mustNew(t, config.Redis{Addrs: []string{srv.Addr}}, "")
		defer rc.Close()
		if err := rc.Ping(ctx).Err(); err == nil {
			t.Errorf("PING in plain text to a TLS-only server succeeded")
		}
	})
}

// TestTLSServerNameIsTheHost: the certificate is checked for the host of the
// address dialled. The server's certificate names only localhost: reached
// as localhost it is accepted, reached at 127.0.0.1 (the same socket) it is
// refused.
func TestTLSServerNameIsTheHost(t *testing.T) {
	files := redistest.NewTLSFiles(t, "localhost")
	srv := redistest.StartTLS(t, files)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good := mustNew(t, config.Redis{Addrs: []string{"localhost:" + strconv.Itoa(srv.Port)}, TLS: true, CAFile: files.CAFile}, "")
	defer good.Close()
	if err := good.Ping(ctx).Err(); err != nil {
		t.Errorf("PING via localhost: %v", err)
	}
	bad := mustNew(t, config.Redis{Addrs: []string{srv.Addr}, TLS: true, CAFile: files.CAFile}, "")
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("PING via 127.0.0.1, which the certificate does not name = %v; want a name mismatch", err)
	}
}

// TestTLSCluster: a cluster client finds the nodes' TLS addresses from
// the cluster itself and verifies each node; keys on every master round-trip.
func TestTLSCluster(t *testing.T) {
	t.Parallel() // own servers; mostly waiting on them
	files := redistest.NewTLSFiles(t)
	addrs := redistest.StartClusterTLS(t, 3, files)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mustNew(t, config.Redis{Addrs: addrs, TLS: true, CAFile: files.CAFile}, "")
	defer c.Close()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("client is %T, want *redis.ClusterClient", c)
	}
	for i := range 20 {
		k := "k" + strconv.Itoa(i)
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s over TLS: %v", k, err)
		}
		if got, err := c.Get(ctx, k).Result(); err != nil || got != k {
			t.Fatalf("GET %s = %q, %v", k, got, err)
		}
	}
	var masters atomic.Int32
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		masters.Add(1)
		return n.Ping(ctx).Err()
	}); err != nil || masters.Load() != 3 {
		t.Errorf("PING every master over TLS: %v (%d masters)", err, masters.Load())
	}

	wrong := mustNew(t, config.Redis{Addrs: addrs, TLS: true, CAFile: redistest.NewTLSFiles(t).CAFile}, "")
	defer wrong.Close()
	if err := wrong.Set(ctx, "k0", "x", 0).Err(); err == nil {
		t.Errorf("SET with the wrong CA succeeded")
	}
}

// TestTLSSentinel: through a TLS-only sentinel to a TLS-only master, both
// verified.
func TestTLSSentinel(t *testing.T) {
	t.Parallel() // own servers; mostly waiting on them
	files := redistest.NewTLSFiles(t)
	master, sentinel, name := redistest.StartSentinelTLS(t, files)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mustNew(t, config.Redis{Addrs: []string{sentinel}, MasterName: name, TLS: true, CAFile: files.CAFile}, "")
	defer c.Close()
	if err := c.Set(ctx, "via-sentinel", "1", 0).Err(); err != nil {
		t.Fatalf("SET through the sentinel over TLS: %v", err)
	}
	if got, err := master.Client(t).Get(ctx, "via-sentinel").Result(); err != nil || got != "1" {
		t.Errorf("GET on the master = %q, %v; want 1", got, err)
	}
	wrong := mustNew(t, config.Redis{Addrs: []string{sentinel}, MasterName: name, TLS: true, CAFile: redistest.NewTLSFiles(t).CAFile}, "")
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("PING through the sentinel with the wrong CA = %v, want a certificate verification error", err)
	}
}

// TestTLSEveryShape: single, sentinel and cluster clients all carry the
// verifying TLS configuration with the CA file's root, and no fixed server
// name (each node is checked under its own host).
func TestTLSEveryShape(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	for name, addrs := range map[string]struct {
		addrs  []string
		master string
	}{
		"single":   {[]string{"127.0.0.1:1"}, ""},
		"sentinel": {[]string{"127.0.0.1:1"}, "m"},
		"cluster":  {[]string{"127.0.0.1:1", "127.0.0.1:2"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := mustNew(t, config.Redis{Addrs: addrs.addrs, MasterName: addrs.master, TLS: true, CAFile: files.CAFile}, "")
			defer c.Close()
			var tc *tls.Config
			switch c := c.(type) {
			case *redis.Client:
				tc = c.Options().TLSConfig
			case *redis.ClusterClient:
				tc = c.Options().TLSConfig
			}
			if tc == nil || tc.InsecureSkipVerify || tc.ServerName != "" || tc.RootCAs == nil || tc.MinVersion != tls.VersionTLS12 {
				t.Fatalf("TLS config = %+v; want verification against the CA file, no fixed ServerName, TLS 1.2+", tc)
			}
		})
	}
}

func TestTLSCAFileErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, file := range map[string]string{
		"missing": filepath.Join(dir, "missing.pem"),
		"not PEM": notPEM,
	} {
		t.Run(name, func(t *testing.T) {
			c, err := redisconn.New(config.Redis{Addrs: []string{"127.0.0.1:1"}, TLS: true, CAFile: file}, redisconn.Passwords{}, redisconn.Options{})
			if err == nil || c != nil || !strings.HasPrefix(err.Error(), "redis.ca_file: ") {
				t.Errorf("New = %v, %v; want nil and an error at redis.ca_file", c, err)
			}
		})
	}
}
