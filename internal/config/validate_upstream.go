package config

import (
	"net/url"
	"strings"
)

// validateUpstream checks upstream.
func (v *validator) validateUpstream(u Upstream) {
	v.baseURL("upstream.base_url", u.BaseURL)
	if (u.APIKeyFile == "") == (u.APIKeyEnv == "") {
		v.add("upstream", "exactly one of api_key_file and api_key_env is required")
	}
	v.file("upstream.api_key_file", u.APIKeyFile)
	v.envName("upstream.api_key_env", u.APIKeyEnv)
	v.positive("upstream.timeout", u.Timeout)
	v.file("upstream.ca_file", u.CAFile)
	if u.MaxIdleConns < 0 {
		v.add("upstream.max_idle_conns", "must not be negative, got %s", v.qint("upstream.max_idle_conns", int64(u.MaxIdleConns)))
	}
	if u.ProxyURL != "" && u.ProxyURL != ProxyFromEnvironment {
		v.proxyURL("upstream.proxy_url", u.ProxyURL)
	}
	v.file("upstream.proxy_auth_file", u.ProxyAuthFile)
	if u.ProxyAuthFile != "" && u.ProxyURL == "" {
		v.add("upstream.proxy_auth_file", "needs upstream.proxy_url: the credentials are for a proxy")
	}
	if u.RetryUnsent < 0 || u.RetryUnsent > maxRetryUnsent {
		v.add("upstream.retry_unsent", "must be 0 to %d, got %s", maxRetryUnsent, v.qint("upstream.retry_unsent", int64(u.RetryUnsent)))
	}
}

// maxRetryUnsent bounds upstream.retry_unsent: every resend waits a backoff
// within upstream.timeout, so more than a few only postpone the 502.
const maxRetryUnsent = 10

// proxyURL checks upstream.proxy_url: an http or https URL of a proxy,
// host and port, with nothing else. Credentials go in proxy_auth_file,
// where no log or page can show them; a URL that holds some is never
// echoed.
func (v *validator) proxyURL(path, s string) {
	u, err := url.Parse(s)
	if err == nil && u.User != nil || strings.Contains(s, "@") {
		v.add(path, "must not contain credentials (user:password@); put them in upstream.proxy_auth_file")
		return
	}
	qs := v.q(path, s)
	switch {
	case err != nil:
		v.add(path, "invalid URL %s", qs)
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(path, `%s is not an http or https URL of a proxy, or "env"`, qs)
	case u.Hostname() == "":
		v.add(path, "%s has no host", qs)
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		v.add(path, "%s must be the proxy's scheme, host and port only", qs)
	}
}

// baseURL checks the upstream's {base_url}: an absolute http(s) URL with a
// host and nothing the gateway could not append a route path to. A trailing
// slash on its path is fine: the proxy joins base and route paths without
// doubling the slash.
func (v *validator) baseURL(path, s string) {
	if s == "" {
		v.add(path, "required")
		return
	}
	v.httpBaseURL(path, s, baseURLRules{
		credentials: "use api_key_file or api_key_env",
		echoQuery:   true,
	})
}

// baseURLRules are what differs between the base URLs the file holds: the
// hint a URL with credentials gets, an example of a good one, and whether a
// query may be echoed in the message.
type baseURLRules struct {
	credentials string
	example     string
	echoQuery   bool
}

// httpBaseURL checks a base URL that paths are appended to: an absolute
// http(s) URL with a host, and no credentials, query or fragment. A URL
// that may hold credentials is never echoed, however malformed.
func (v *validator) httpBaseURL(path, s string, r baseURLRules) {
	u, err := url.Parse(s)
	if err == nil && u.User != nil {
		v.add(path, "must not contain credentials (user:password@); %s", r.credentials)
		return
	}
	qs := v.q(path, s)
	if strings.Contains(qs, "@") {
		qs = "the URL"
	}
	example := ""
	if r.example != "" {
		example = " (" + r.example + ")"
	}
	switch {
	case err != nil:
		v.add(path, "invalid URL %s", qs)
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(path, "%s is not an absolute http or https URL%s", qs, example)
	case u.Host == "" || u.Hostname() == "":
		v.add(path, "%s has no host", qs)
	case (u.RawQuery != "" || u.ForceQuery) && r.echoQuery:
		v.add(path, "%s must not have a query", qs)
	case u.RawQuery != "" || u.ForceQuery:
		// Not echoed: a query is where a careless token would sit.
		v.add(path, "must not have a query (%s)", r.credentials)
	case u.Fragment != "" || strings.Contains(s, "#"):
		v.add(path, "%s must not have a fragment", qs)
	}
}
