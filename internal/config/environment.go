package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"
)

// CheckEnvironment reads the files and environment variables c names, as
// faxgate serve does before it starts, and returns a problem, at its YAML
// path, for each one serve could not use: an API key file that is missing,
// unreadable or blank, an API key variable that is unset or blank, a CA
// file without a PEM certificate (upstream's, or Redis's while Redis is in
// use), a server certificate that is expired or does not match its key, an
// unset Redis or sentinel password variable while Redis is in use, and the TLS files of
// the mode in force, an unset or malformed tracing headers variable while
// tracing is on, and two listeners whose host names resolve to one
// address. It never puts a file's content or a variable's value in a
// problem. A nil getenv treats every variable as unset.
//
// Validate stays pure; LoadAndCheck runs both, which is what faxgate check
// and faxgate serve do, so check refuses every file serve would refuse.
func CheckEnvironment(c *Config, getenv func(string) (string, bool)) Problems {
	v := &validator{}
	v.environment(c, getenv)
	return v.problems
}

// UsesRedis reports whether c needs the Redis connection of the redis
// section: for the token store, the rate limits or the ACME storage.
func (c *Config) UsesRedis() bool {
	return c.Token.Store == "redis" || c.RateLimit.Backend == "redis" ||
		c.Server.TLS.Mode == "acme" && c.Server.TLS.ACME.Storage == "redis"
}

func (v *validator) environment(c *Config, getenv func(string) (string, bool)) {
	if c == nil {
		return
	}
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	u := c.Upstream
	if u.APIKeyFile != "" {
		v.keyFile("upstream.api_key_file", u.APIKeyFile)
	}
	if u.APIKeyEnv != "" {
		v.secretEnv("upstream.api_key_env", u.APIKeyEnv, getenv, true)
	}
	if u.CAFile != "" {
		v.pemCertificates("upstream.ca_file", u.CAFile)
	}
	if u.ProxyAuthFile != "" {
		v.proxyAuthFile("upstream.proxy_auth_file", u.ProxyAuthFile)
	}
	if u.ProxyURL == ProxyFromEnvironment {
		v.proxyEnv("upstream.proxy_url", getenv)
	}
	if c.UsesRedis() && c.Redis.SentinelPasswordEnv != "" {
		// Read like password_env: the sentinels' requirepass may be "".
		v.secretEnv("redis.sentinel_password_env", c.Redis.SentinelPasswordEnv, getenv, false)
	}
	if c.UsesRedis() && c.Redis.PasswordEnv != "" {
		// An empty password is allowed: the variable may be set to "" on
		// purpose where Redis has none. Unset means the secret is missing.
		v.secretEnv("redis.password_env", c.Redis.PasswordEnv, getenv, false)
	}
	if c.UsesRedis() && c.Redis.TLS && c.Redis.CAFile != "" {
		v.pemCertificates("redis.ca_file", c.Redis.CAFile)
	}
	t := c.Server.TLS
	if t.Mode == "files" && t.CertFile != "" && t.KeyFile != "" {
		v.keyPair("server.tls.cert_file", t.CertFile, "server.tls.key_file", t.KeyFile)
	}
	if t.Mode != "off" && t.ClientCAFile != "" {
		v.pemCertificates("server.tls.client_ca_file", t.ClientCAFile)
	}
	if t.Mode == "acme" && t.ACME.CARootFile != "" {
		v.pemCertificates("server.tls.acme.ca_root_file", t.ACME.CARootFile)
	}
	v.tracingHeaders(c.Tracing, getenv)
	v.resolvedListeners(listeners(c))
}

// readFile reads the file named at path; on failure it reports why without
// repeating the name as expanded (a ${NAME} shows as written).
func (v *validator) readFile(path, name string) ([]byte, bool) {
	b, err := os.ReadFile(name)
	if err != nil {
		v.add(path, "cannot read %s: %s", v.q(path, name), osReason(err))
		return nil, false
	}
	return b, true
}

// osReason is the reason of an os error without the path it carries.
func osReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// keyFile checks the API key file as the token manager reads it: the key is
// the content with surrounding white space trimmed, and must not be empty.
func (v *validator) keyFile(path, name string) {
	b, ok := v.readFile(path, name)
	if ok && strings.TrimSpace(string(b)) == "" {
		v.add(path, "%s is empty", v.q(path, name))
	}
}

// proxyAuthFile checks the proxy's credentials file as the transport reads
// it (ParseProxyAuth): "user:password" on one line. Nothing of the content
// is ever repeated.
func (v *validator) proxyAuthFile(path, name string) {
	b, ok := v.readFile(path, name)
	if !ok {
		return
	}
	if _, _, err := ParseProxyAuth(b); err != nil {
		v.add(path, "%s %s", v.q(path, name), err.Error())
	}
}

// ParseProxyAuth reads upstream.proxy_auth_file's content: "user:password",
// surrounding white space trimmed. The error never holds the content.
func ParseProxyAuth(b []byte) (user, password string, err error) {
	s := strings.TrimSpace(string(b))
	user, password, ok := strings.Cut(s, ":")
	switch {
	case s == "":
		return "", "", errors.New("is empty")
	case !ok || user == "":
		return "", "", errors.New(`does not hold "user:password"`)
	case strings.ContainsAny(s, "\r\n"):
		return "", "", errors.New(`holds more than one line; want "user:password"`)
	}
	return user, password, nil
}

// proxyEnv checks the variables upstream.proxy_url "env" reads: each one
// that is set is a proxy URL as Go's rules read it (http, https or socks5,
// with a host; a bare host:port is http). The values are never repeated: a
// proxy URL may hold credentials.
func (v *validator) proxyEnv(path string, getenv func(string) (string, bool)) {
	for _, name := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		val, ok := getenv(name)
		if !ok || strings.TrimSpace(val) == "" {
			continue
		}
		if !strings.Contains(val, "://") {
			val = "http://" + val
		}
		u, err := url.Parse(val)
		if err != nil || u.Hostname() == "" || u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5" {
			v.add(path, "environment variable %s is not a proxy URL", name)
		}
	}
}

// secretEnv checks that the variable named at path is set and, when
// required, not blank.
func (v *validator) secretEnv(path, name string, getenv func(string) (string, bool), required bool) {
	val, ok := getenv(name)
	switch {
	case !ok:
		v.add(path, "environment variable %s is not set", v.q(path, name))
	case required && strings.TrimSpace(val) == "":
		v.add(path, "environment variable %s is empty", v.q(path, name))
	}
}

// pemCertificates checks a trust root file: at least one PEM certificate
// that parses, which is what x509.CertPool.AppendCertsFromPEM, used to load
// it, needs.
func (v *validator) pemCertificates(path, name string) {
	b, ok := v.readFile(path, name)
	if ok && !x509.NewCertPool().AppendCertsFromPEM(b) {
		v.add(path, "%s holds no PEM certificate", v.q(path, name))
	}
}

// keyPair checks that the certificate and key files form a pair.
func (v *validator) keyPair(certPath, cert, keyPath, key string) {
	_, cok := v.readFile(certPath, cert)
	_, kok := v.readFile(keyPath, key)
	if !cok || !kok {
		return
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		// crypto/tls's messages name no key material.
		v.add(certPath, "%s and %s are not a certificate and key pair: %s",
			v.q(certPath, cert), v.q(keyPath, key), strings.TrimPrefix(err.Error(), "tls: "))
		return
	}
	// An expired certificate would fail every handshake: refused at start
	// rather than served. (Leaf is set by LoadX509KeyPair since Go 1.23.)
	if leaf := pair.Leaf; leaf != nil && v.clock().After(leaf.NotAfter) {
		v.add(certPath, "%s expired at %s", v.q(certPath, cert), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

// clock is the time certificates are checked at: v.now, else the wall clock.
func (v *validator) clock() time.Time {
	if v.now != nil {
		return v.now()
	}
	return time.Now()
}
