package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faxgate/faxgate/internal/config"
)

// NewTransport builds the upstream transport of the upstream section. It is
// tuned for one upstream host: every idle connection may go to it,
// compression is left to the caller (bodies are relayed unchanged), and no
// proxy is taken from the environment (packages never read it; an
// HTTPS_PROXY meant for something else must not reroute the API key). The
// token client shares it, so token calls reuse the proxy's connections.
// Over plain HTTP, its connections send large request bodies of known
// length in large writes (uploadConn).
func NewTransport(u config.Upstream) (*http.Transport, error) {
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
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           uploadDialer((&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext, newUploadBuffers(uploadBuffersMax)),
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

// uploadBufSize is the size of one upload write buffer, and uploadBuffersMax
// caps how many are in use at once (4 MiB in all). The part of a request
// body that does not fit net/http's 4 KiB write buffer reaches the
// connection through ReadFrom: without it, net/http copies it in 32 KiB
// pieces, one write(2) each, and each write wakes the upstream's reader. With 256 KiB, a 1 MiB upload costs
// about 8 reads and 8 writes instead of 33 of each.
const (
	uploadBufSize    = 256 << 10
	uploadBuffersMax = 16
)

// uploadBuffers pools the upload write buffers under a cap.
type uploadBuffers struct {
	pool  sync.Pool
	inUse atomic.Int64
	max   int64
}

func newUploadBuffers(max int64) *uploadBuffers {
	b := &uploadBuffers{max: max}
	b.pool.New = func() any { return new([uploadBufSize]byte) }
	return b
}

// get returns a buffer, or nil when max are in use.
func (b *uploadBuffers) get() *[uploadBufSize]byte {
	if b.inUse.Add(1) > b.max {
		b.inUse.Add(-1)
		return nil
	}
	return b.pool.Get().(*[uploadBufSize]byte)
}

func (b *uploadBuffers) put(p *[uploadBufSize]byte) {
	b.pool.Put(p)
	b.inUse.Add(-1)
}

// uploadDialer wraps every connection dial makes in an uploadConn.
func uploadDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), bufs *uploadBuffers) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &uploadConn{Conn: c, bufs: bufs}, nil
	}
}

// uploadConn is an upstream connection whose ReadFrom copies through a
// large buffer. net/http's transport writes a request body of known length
// with io.Copy(conn, io.LimitReader(body, n)), which ends up here: over
// plain HTTP each read of the caller's body becomes one write(2) of up to
// uploadBufSize. Over TLS the transport writes through tls.Conn, and a
// body of unknown length goes through its chunked writer: neither calls
// ReadFrom, and both write 32 KiB at a time as before. A buffer is held
// until the transport has written the whole body, so slow uploaders can
// take all of them; the others then copy as net/http would.
type uploadConn struct {
	net.Conn
	bufs *uploadBuffers
}

func (c *uploadConn) ReadFrom(r io.Reader) (int64, error) {
	dst := struct{ io.Writer }{c.Conn} // hides ReadFrom, or io.Copy would come back here
	b := c.bufs.get()
	if b == nil {
		return io.Copy(dst, r)
	}
	defer c.bufs.put(b)
	return io.CopyBuffer(dst, r, b[:])
}
