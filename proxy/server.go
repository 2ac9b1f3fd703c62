package proxy

import (
	"context"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// ServerOptions configures the proxy listener's http.Server.
type ServerOptions struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	Logger            *zap.Logger
	// TLS says the server is served on a WrapTLSListener: it then speaks
	// HTTP/2 (ALPN h2) as well as HTTP/1.x. Without it, HTTP/1.x only.
	TLS bool
}

// NewServer builds the proxy listener's server. Serve it on a listener
// from WrapListener: the framing sniffer answers heads over 32 KiB (431),
// unsupported versions (505) and malformed request lines (400) in the
// gateway's envelope. Its header limit sits above the contract's 32 KiB so
// that, even without the sniffer, the handler rather than the server
// answers the heads it can.
func NewServer(h http.Handler, o ServerOptions) *http.Server {
	// Explicit, so that the plaintext listener never speaks h2c, and the
	// TLS one configures net/http's HTTP/2 server (with its GOAWAY on
	// Shutdown) although the handshake happens in the listener.
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(o.TLS)
	return &http.Server{
		Protocols:         &p,
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    4 * maxHeaderBytes,
		// Otherwise net/http answers "OPTIONS *" itself with 200, unlogged and
		// uncounted, where the contract wants 405 method_not_allowed.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     zap.NewStdLog(o.Logger.Named("http")),
		ConnContext:                  withConn,
	}
}

type connKey struct{}

// withConn puts a framing connection in its requests' contexts, so the
// handler can ask it whether a body has arrived whole (bodyInMemory).
func withConn(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// bodyInMemory reports whether r's body is known to be in memory already:
// an HTTP/1 request on a framing connection whose reads so far ended on a
// message boundary.
func bodyInMemory(r *http.Request) bool {
	fc, _ := r.Context().Value(connKey{}).(*framingConn)
	return fc != nil && r.ProtoMajor == 1 && fc.bodyInMemory()
}
