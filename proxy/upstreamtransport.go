package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// TransportOptions are the settings of the upstream transport (the
// upstream section).
type TransportOptions struct {
	// CAFile is upstream.ca_file: an extra trust root for the upstream.
	CAFile string
	// MaxIdleConns is upstream.max_idle_conns.
	MaxIdleConns int
}

// NewTransport builds the upstream transport. It is
// tuned for one upstream host: every idle connection may go to it,
// compression is left to the caller (bodies are relayed unchanged), and no
// proxy is taken from the environment (packages never read it; an
// HTTPS_PROXY meant for something else must not reroute the API key). The
// token client shares it, so token calls reuse the proxy's connections.
// Request bodies go upstream in net/http's own 32 KiB writes: larger ones
// save the gateway's core but cost the sender as much, and stall the
// connection with zero windows. On a plain-HTTP connection a body of
// known length is read from the caller 64 KiB at a time, which halves the
// reads and changes nothing upstream (replay_send.go, docs/performance.md).
func NewTransport(u TransportOptions) (*http.Transport, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if u.CAFile != "" {
		pem, err := os.ReadFile(u.CAFile)
		if err != nil {
			return nil, fmt.Errorf("upstream.ca_file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream.ca_file: no PEM certificate in %s", u.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	bufs := newSendBufPool()
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &upstreamConn{Conn: c, send: sender{bufs: bufs}}, nil // bodies go out through it (replay_send.go)
		},
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          u.MaxIdleConns,
		MaxIdleConnsPerHost:   u.MaxIdleConns,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}, nil
}
