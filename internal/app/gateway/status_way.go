package gateway

import (
	"net/url"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/proxy"
)

// EgressStatus is the way to the vendor (docs/deployment.md#through-an-egress-proxy):
// the forward proxy, never its credentials, and what the request path sent
// again since the start.
type EgressStatus struct {
	// Proxy is upstream.proxy_url without credentials: "" direct, "env"
	// when taken from HTTPS_PROXY and NO_PROXY, or the proxy's URL.
	Proxy string `json:"proxy"`
	// Credentials: the proxy's credentials come from a file (never shown).
	Credentials bool `json:"credentials"`
	// Retries counts the requests sent again since the start, by reason
	// (unsent, reset, throttled).
	Retries map[string]uint64 `json:"retries"`
	// ProxyErrors counts the proxy's failures since the start, by reason
	// (unreachable, auth, refused).
	ProxyErrors map[string]uint64 `json:"proxy_errors,omitempty"`
}

// ShadowStatus is the shadow candidate in force
// (docs/callers-and-policy.md#trying-a-change-in-shadow-mode).
type ShadowStatus struct {
	ConfigFile string `json:"config_file"`
	// Differences are, per caller (as the live rules name it), the last 5
	// minutes' requests the candidate decided otherwise.
	Differences map[string][]proxy.ShadowDifference `json:"differences"`
}

func (g *Gateway) egressStatus(u config.Upstream) EgressStatus {
	es := EgressStatus{Proxy: safeProxyURL(u.ProxyURL), Credentials: u.ProxyAuthFile != "",
		Retries: g.Handler.Retries()}
	if u.ProxyURL != "" {
		es.ProxyErrors = map[string]uint64{}
		for _, r := range []string{proxy.ProxyUnreachable, proxy.ProxyAuth, proxy.ProxyRefused} {
			es.ProxyErrors[r] = counterValue(g.Metrics.Proxy.UpstreamProxyErrors.WithLabelValues(r))
		}
	}
	return es
}

// safeProxyURL is a proxy URL as the page may show it: without userinfo
// (config refuses it there; a URL that holds some anyway is not shown).
func safeProxyURL(s string) string {
	if s == "" || s == config.ProxyFromEnvironment {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid)"
	}
	u.User = nil
	return u.String()
}

// counterValue reads a counter's value.
func counterValue(c prometheus.Counter) uint64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}
