package gateway

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpproxy"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// egressOptions is the way to the vendor of u (docs/deployment.md#through-an-egress-proxy):
// no proxy, upstream.proxy_url, or Go's rules over HTTPS_PROXY, HTTP_PROXY
// and NO_PROXY read through getenv (packages never read the environment
// themselves), with the credentials of upstream.proxy_auth_file, read now
// and again whenever the file changes (proxyAuth.run).
func (g *Gateway) egressOptions(u config.Upstream, getenv func(string) (string, bool), log *zap.Logger) (proxy.EgressOptions, error) {
	o := proxy.EgressOptions{Errors: g.Metrics.Proxy.UpstreamProxyErrors, Logger: log}
	switch u.ProxyURL {
	case "":
		return o, nil
	case config.ProxyFromEnvironment:
		env := func(names ...string) string {
			for _, n := range names {
				if v, ok := getenv(n); ok {
					return v
				}
			}
			return ""
		}
		pc := httpproxy.Config{HTTPSProxy: env("HTTPS_PROXY", "https_proxy"), HTTPProxy: env("HTTP_PROXY", "http_proxy"),
			NoProxy: env("NO_PROXY", "no_proxy")}
		o.Proxy = pc.ProxyFunc()
	default:
		p, err := url.Parse(u.ProxyURL)
		if err != nil { // validated by config
			return o, fmt.Errorf("upstream.proxy_url: invalid URL")
		}
		o.Proxy = func(*url.URL) (*url.URL, error) { return p, nil }
	}
	if u.ProxyAuthFile != "" {
		g.proxyAuth = &proxyAuth{path: u.ProxyAuthFile, creds: &proxy.ProxyCredentials{}, log: log}
		if err := g.proxyAuth.load(); err != nil {
			return o, err
		}
		g.proxyAuth.watch = tokencache.NewKeyWatcher(u.ProxyAuthFile, g.deps.fileWatchEvery(), g.deps.Clock, log)
		g.proxyAuth.watch.Panics = g.Metrics.countPanic
		o.Credentials = g.proxyAuth.creds
	}
	return o, nil
}

// proxyAuth keeps the proxy's credentials current: the file is polled like
// the API key file, and a change is read at once (no restart to rotate).
type proxyAuth struct {
	path  string
	creds *proxy.ProxyCredentials
	watch *tokencache.KeyWatcher
	log   *zap.Logger
}

// load reads the file into creds. Its errors never hold the content.
func (a *proxyAuth) load() error {
	b, err := os.ReadFile(a.path)
	if err != nil {
		return fmt.Errorf("upstream.proxy_auth_file: %w", err)
	}
	user, password, err := config.ParseProxyAuth(b)
	if err != nil {
		return fmt.Errorf("upstream.proxy_auth_file: %q %s", a.path, err.Error())
	}
	a.creds.Set(user, password)
	return nil
}

// run re-reads the file whenever its content changes, until ctx ends. A
// file that does not read keeps the credentials in force, and says why.
func (a *proxyAuth) run(ctx context.Context, panics background.Counter) {
	go a.watch.Run(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.watch.Changed():
			func() {
				defer background.Guard(a.log, panics, "proxy_auth_reload", "the credentials in force stay", nil)
				if err := a.load(); err != nil {
					a.log.Warn("the egress proxy's credentials file changed but does not read; the credentials in force stay",
						zap.Error(err))
					return
				}
				a.log.Info("the egress proxy's credentials were re-read")
			}()
		}
	}
}
