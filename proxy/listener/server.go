package listener

import (
	"context"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// MaxHeaderBytes is the largest request head the gateway serves, empty
// line included; a larger one is refused (431, docs/security.md).
const MaxHeaderBytes = 32 << 10

// StreamWindow is the HTTP/2 flow-control window of one request body: the
// most of a body the server takes in before the handler reads it. A request
// waiting for the upstream budget has not read its body yet
// (docs/upstream-budget.md#waiting-instead-of-refusing): with Go's default
// of 1 MiB, 200 waiters with stalled uploads grew the process by 230 MB;
// with 128 KiB by 56 MB, with 64 KiB by 40 MB. Below 64 KiB (the window a
// client may fill before it has read the server's settings) Go's server
// resets streams. The cost is one upload's speed over a slow link, at most
// a window per round trip (64 MB/s at 1 ms); on loopback 1 MiB uploads
// showed no difference (docs/performance.md).
const StreamWindow = 64 << 10

// ServerOptions configures the proxy listener's http.Server.
type ServerOptions struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	Logger            *zap.Logger
	// TLS says the server is served on a WrapTLS listener: it then speaks
	// HTTP/2 (ALPN h2) as well as HTTP/1.x. Without it, HTTP/1.x only.
	TLS bool
}

// NewServer builds the proxy listener's server for handler h. Serve it on a
// listener from Wrap or WrapTLS: the framing sniffer hands h the heads it
// refuses as stand-in requests (Conn.Verdict). Its header limit sits above
// MaxHeaderBytes so that, even without the sniffer, the handler rather than
// the server answers the heads it can.
func NewServer(h http.Handler, o ServerOptions) *http.Server {
	// Explicit, so that the plaintext listener never speaks h2c, and the
	// TLS one configures net/http's HTTP/2 server (with its GOAWAY on
	// Shutdown) although the handshake happens in the listener.
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(o.TLS)
	return &http.Server{
		Protocols:         &p,
		HTTP2:             &http.HTTP2Config{MaxReceiveBufferPerStream: StreamWindow},
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    4 * MaxHeaderBytes,
		// Otherwise net/http answers "OPTIONS *" itself with 200, unlogged
		// and uncounted, where the gateway answers 405 method_not_allowed.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     zap.NewStdLog(o.Logger.Named("http")),
		ConnContext:                  withConn,
	}
}

type connKey struct{}

// withConn puts a framing connection, plain or under TLS, in its requests'
// contexts, where ConnOf finds it for the handler.
func withConn(ctx context.Context, c net.Conn) context.Context {
	switch fc := c.(type) {
	case *framingConn:
		return context.WithValue(ctx, connKey{}, fc)
	case *tlsFramingConn:
		return context.WithValue(ctx, connKey{}, fc.framingConn)
	}
	return ctx
}

// connOf is r's framing connection, nil when it has none.
func connOf(r *http.Request) *framingConn {
	fc, _ := r.Context().Value(connKey{}).(*framingConn)
	return fc
}

// Conn is the framing connection under one HTTP/1 request, as its handler
// sees it (ConnOf): the head's verdict, whether the body is in memory,
// whether the caller has closed its end, and the hold on writes. It is
// looked up in the request's context once, when the request arrives, not
// at every question. The zero Conn stands for a request no sniffer read
// (HTTP/2, or one built without the listener).
type Conn struct{ fc *framingConn }

// ConnOf returns the framing connection under r, the zero Conn when there
// is none or r is not HTTP/1.
func ConnOf(r *http.Request) Conn {
	if r.ProtoMajor != 1 {
		return Conn{}
	}
	return Conn{connOf(r)}
}

// PeerClosed reports whether the caller has closed its end of the
// connection (Linux, plain connections; false elsewhere and over TLS).
// net/http sees a close only once the request's body is consumed; a
// request that waits with its body unread (docs/upstream-budget.md,
// Waiting instead of refusing) asks this before it takes its turn, so that
// a departed caller is not counted.
func (c Conn) PeerClosed() bool { return c.fc != nil && peerClosed(c.fc.Conn) }

// BodyInMemory reports whether the request's body is known to be in memory
// already: the connection's reads so far ended on a message boundary.
// Reading such a body cannot block, so it needs no read deadline.
func (c Conn) BodyInMemory() bool { return c.fc != nil && c.fc.bodyInMemory() }
