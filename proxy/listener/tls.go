package listener

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"time"
)

// TLS on the proxy listener puts the framing sniffer under the TLS
// plaintext, for HTTP/1.x only. net/http would do the handshake itself,
// after Accept, on a *tls.Conn, and the sniffer cannot sit between a
// *tls.Conn and the server. So the listener does the handshake before
// handing a connection over: an h2 connection (ALPN) goes to the server as
// the *tls.Conn it is, which net/http serves with its HTTP/2 server; any
// other goes through the sniffer, and the server, finding no *tls.Conn but
// a ConnectionState method, still sets Request.TLS (net/http's
// connectionStater). A handshake that fails never reaches the server; its
// reason is reported to OnHandshakeError, from the error value rather than
// from the server's log text.

// DefaultHandshakeTimeout bounds a TLS handshake when
// TLSOptions.HandshakeTimeout is not set.
const DefaultHandshakeTimeout = 10 * time.Second

// TLSOptions configure WrapTLS.
type TLSOptions struct {
	// HandshakeTimeout bounds each handshake. Default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// OnHandshakeError, when set, is called for every failed handshake
	// with HandshakeReason's reason, from the handshake's goroutine.
	OnHandshakeError func(reason string, err error)
}

// WrapTLS serves TLS with cfg on ln: Accept returns connections whose
// handshake is complete, HTTP/1.x ones behind the framing sniffer (see
// Wrap), h2 ones as *tls.Conn. Serve it with a server from NewServer with
// ServerOptions.TLS set, so that h2 is configured.
func WrapTLS(ln net.Listener, cfg *tls.Config, o TLSOptions) net.Listener {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	l := &tlsListener{Listener: ln, cfg: cfg, o: o, results: make(chan acceptResult),
		done: make(chan struct{}), pending: map[net.Conn]struct{}{}}
	go l.acceptLoop()
	return l
}

type acceptResult struct {
	c   net.Conn
	err error
}

type tlsListener struct {
	net.Listener
	cfg     *tls.Config
	o       TLSOptions
	results chan acceptResult
	done    chan struct{}
	once    sync.Once

	mu      sync.Mutex
	pending map[net.Conn]struct{} // connections in their handshake
}

func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.results:
		return r.c, r.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and cuts the handshakes in progress: those
// connections never reached the server, so no drain waits for them.
func (l *tlsListener) Close() error {
	err := net.ErrClosed
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
		l.mu.Lock()
		for c := range l.pending {
			_ = c.Close()
		}
		l.mu.Unlock()
	})
	return err
}

func (l *tlsListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			// The server decides what an error means (it backs off on
			// temporary ones and calls Accept again).
			select {
			case l.results <- acceptResult{nil, err}:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		l.mu.Lock()
		select {
		case <-l.done:
			l.mu.Unlock()
			_ = c.Close()
			return
		default:
		}
		l.pending[c] = struct{}{}
		l.mu.Unlock()
		go l.handshake(c)
	}
}

func (l *tlsListener) handshake(raw net.Conn) {
	tc := tls.Server(raw, l.cfg)
	_ = raw.SetDeadline(time.Now().Add(l.o.HandshakeTimeout))
	err := tc.Handshake()
	l.mu.Lock()
	delete(l.pending, raw)
	l.mu.Unlock()
	if err != nil {
		select {
		case <-l.done: // cut by Close: the listener's doing, not the client's
		default:
			if l.o.OnHandshakeError != nil {
				l.o.OnHandshakeError(HandshakeReason(err), err)
			}
		}
		_ = raw.Close()
		return
	}
	_ = raw.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol == "acme-tls/1" {
		// An ACME tls-alpn-01 validation (RFC 8737): the handshake was
		// the answer; nothing is served on such a connection.
		_ = tc.Close()
		return
	}
	var c net.Conn = tc
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		c = &tlsFramingConn{newFramingConn(tc, sniffBufSize), tc}
	}
	select {
	case l.results <- acceptResult{c, nil}:
	case <-l.done:
		_ = c.Close()
	}
}

// tlsFramingConn is an HTTP/1.x connection over TLS behind the sniffer. Its
// ConnectionState is how net/http fills Request.TLS for a connection that
// is not a *tls.Conn.
type tlsFramingConn struct {
	*framingConn
	tc *tls.Conn
}

// ConnectionState returns the TLS state of the connection.
func (c *tlsFramingConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// HandshakeReason classifies a failed server handshake for
// faxgate_tls_handshake_errors_total: no_client_cert (client_auth require
// and none sent), bad_client_cert (a client certificate that does not
// verify or parse), protocol (a TLS exchange that went wrong: not TLS, no
// common version, cipher suite or protocol, an alert from the client), or
// other (the connection failed: EOF, timeout, reset). crypto/tls gives
// the first two no type of their own, so its messages decide; the tests
// pin them.
func HandshakeReason(err error) string {
	msg := err.Error()
	var ve *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var ae tls.AlertError
	switch {
	case strings.Contains(msg, "client didn't provide a certificate"):
		return "no_client_cert"
	case errors.As(err, &ve), strings.Contains(msg, "client certificate"):
		return "bad_client_cert"
	case errors.As(err, &rh), errors.As(err, &ae),
		strings.HasPrefix(msg, "tls: "), strings.HasPrefix(msg, "remote error: tls: "):
		return "protocol"
	}
	return "other"
}
