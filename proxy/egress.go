package proxy

// The way to the vendor through the company's forward proxy
// (docs/deployment.md#through-an-egress-proxy): every upstream request, the
// token endpoint's included, goes through it (CONNECT for an https base_url,
// absolute-form for http), with the proxy's credentials, which only the
// proxy ever sees. A proxy that refuses or cannot be reached is counted and
// logged here, for requests and token renewals alike, and the request is
// one the vendor certainly never saw (failure.go).

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/tokencache"
)

// The reasons of faxgate_upstream_proxy_errors_total.
const (
	ProxyUnreachable = "unreachable" // the proxy could not be reached (dial, TLS to it)
	ProxyAuth        = "auth"        // it refused its credentials (407, or 401 to a CONNECT)
	ProxyRefused     = "refused"     // it answered another refusal (403, 5xx ...) to the tunnel or request
)

// ProxyRefusedError is a proxy's refusal of a tunnel (CONNECT) or of a
// request it was to carry: the upstream never saw the request.
type ProxyRefusedError struct{ Status int }

func (e *ProxyRefusedError) Error() string {
	return "the egress proxy refused with " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
}

// ProxyCredentials holds the proxy's credentials (upstream.proxy_auth_file)
// as the current user and password, swapped whole when the file changes.
// Nothing of it prints: both are secrets.
type ProxyCredentials struct {
	cur atomic.Pointer[proxyUser]
}

type proxyUser struct{ user, password tokencache.Secret }

// Set replaces the credentials.
func (c *ProxyCredentials) Set(user, password string) {
	c.cur.Store(&proxyUser{tokencache.NewSecret(user), tokencache.NewSecret(password)})
}

// userinfo is the credentials as a URL's userinfo, nil when none are set.
func (c *ProxyCredentials) userinfo() *url.Userinfo {
	if c == nil {
		return nil
	}
	u := c.cur.Load()
	if u == nil {
		return nil
	}
	return url.UserPassword(u.user.Reveal(), u.password.Reveal())
}

// EgressOptions configures the proxy leg of the upstream transport.
type EgressOptions struct {
	// Proxy chooses the proxy of a request's URL (nil: direct):
	// upstream.proxy_url, or Go's rules over the injected HTTPS_PROXY,
	// HTTP_PROXY and NO_PROXY for "env".
	Proxy func(*url.URL) (*url.URL, error)
	// Credentials, when set, authenticate to the proxy (Basic).
	Credentials *ProxyCredentials
	// Errors counts the proxy's failures by reason
	// (faxgate_upstream_proxy_errors_total); nil counts nothing.
	Errors *prometheus.CounterVec
	// Logger gets a warn line when the proxy fails, at most once per
	// reason every proxyWarnEvery.
	Logger *zap.Logger
}

// proxyWarnEvery spaces the warn lines of a failing proxy: under load every
// request would say the same.
const proxyWarnEvery = 10 * time.Second

// WithEgress sets t up to reach the upstream through o's proxy and returns
// the round tripper every upstream request (and token renewal) must use.
// Without a proxy it returns t itself: the direct way costs nothing more.
func WithEgress(t *http.Transport, o EgressOptions) http.RoundTripper {
	if o.Proxy == nil {
		return t
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	e := &egress{next: t, o: o, warned: map[string]time.Time{}}
	if o.Errors != nil {
		for _, r := range []string{ProxyUnreachable, ProxyAuth, ProxyRefused} {
			o.Errors.WithLabelValues(r) // at 0 from the start
		}
	}
	t.Proxy = e.proxyFor
	// A CONNECT the proxy refuses is told apart by its status, which Go
	// otherwise turns into a bare status text.
	t.OnProxyConnectResponse = func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
		if res.StatusCode/100 != 2 {
			return &ProxyRefusedError{Status: res.StatusCode}
		}
		return nil
	}
	return e
}

// egress is the upstream transport with a proxy in the way.
type egress struct {
	next *http.Transport
	o    EgressOptions

	mu     sync.Mutex
	warned map[string]time.Time // the last warn line per reason
	missed map[string]int       // failures since that line
}

// proxyFor is the transport's Proxy: the proxy of req's URL, with the
// current credentials (Go sends them as Proxy-Authorization, to the proxy
// only: on the CONNECT, or on an absolute-form request for an http
// base_url, which the proxy strips before it forwards).
func (e *egress) proxyFor(req *http.Request) (*url.URL, error) {
	u, err := e.o.Proxy(req.URL)
	if err != nil || u == nil {
		return u, err
	}
	if ui := e.o.Credentials.userinfo(); ui != nil {
		c := *u
		c.User = ui
		return &c, nil
	}
	return u, nil
}

// RoundTrip implements http.RoundTripper.
func (e *egress) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := e.next.RoundTrip(req)
	if err != nil {
		var refused *ProxyRefusedError
		var op *net.OpError
		switch {
		case errors.As(err, &refused):
			e.failed(refusedReason(refused.Status), refused.Status)
			return nil, refused
		case errors.As(err, &op) && op.Op == "proxyconnect":
			e.failed(ProxyUnreachable, 0)
		}
		return nil, err
	}
	if res.StatusCode == http.StatusProxyAuthRequired && req.URL.Scheme == "http" {
		// Absolute-form through the proxy: its 407 is the proxy's, not the
		// vendor's, and is never relayed.
		_, _ = io.CopyN(io.Discard, res.Body, 4<<10)
		res.Body.Close()
		e.failed(ProxyAuth, res.StatusCode)
		return nil, &ProxyRefusedError{Status: res.StatusCode}
	}
	return res, nil
}

// CloseIdleConnections closes the transport's idle connections.
func (e *egress) CloseIdleConnections() { e.next.CloseIdleConnections() }

// refusedReason is the reason of a proxy's refusal of a tunnel: 407, or
// the 401 some proxies (tinyproxy) answer a CONNECT with, is its
// credentials'.
func refusedReason(status int) string {
	if status == http.StatusProxyAuthRequired || status == http.StatusUnauthorized {
		return ProxyAuth
	}
	return ProxyRefused
}

// failed counts a proxy failure and logs it, at most once per reason every
// proxyWarnEvery, with how many came since the last line. The line names
// the status, never the credentials or the proxy's answer.
func (e *egress) failed(reason string, status int) {
	if e.o.Errors != nil {
		e.o.Errors.WithLabelValues(reason).Inc()
	}
	now := time.Now()
	e.mu.Lock()
	last, missed := e.warned[reason], 0
	log := now.Sub(last) >= proxyWarnEvery
	if log {
		e.warned[reason] = now
		if e.missed != nil {
			missed = e.missed[reason]
			delete(e.missed, reason)
		}
	} else {
		if e.missed == nil {
			e.missed = map[string]int{}
		}
		e.missed[reason]++
	}
	e.mu.Unlock()
	if !log {
		return
	}
	msg := "the egress proxy refused the upstream request"
	if reason == ProxyUnreachable {
		msg = "the egress proxy could not be reached"
	}
	e.o.Logger.Warn(msg, zap.String("reason", reason), zap.Int("status", status),
		zap.Int("since_last_line", missed))
}
