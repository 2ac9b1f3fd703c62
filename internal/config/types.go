// Package config defines faxgate's configuration file (docs/configuration.md):
// its types, its defaults, strict loading with ${ENV} expansion, and pure
// validation that reports every problem with its YAML path.
package config

import "time"

// Config is the whole configuration file.
type Config struct {
	Server    Server    `yaml:"server"`
	Admin     Admin     `yaml:"admin"`
	Upstream  Upstream  `yaml:"upstream"`
	Token     Token     `yaml:"token"`
	Redis     Redis     `yaml:"redis"`
	Callers   Callers   `yaml:"callers"`
	RateLimit RateLimit `yaml:"rate_limit"`
	Routes    Routes    `yaml:"routes"`
	Policy    Policy    `yaml:"policy"`
	// UpstreamBudget shares the vendor's request budget (docs/upstream-budget.md).
	UpstreamBudget UpstreamBudget `yaml:"upstream_budget"`
	// Tracing exports OpenTelemetry traces (docs/tracing.md).
	Tracing Tracing `yaml:"tracing"`
	Log     Log     `yaml:"log"`
	// Shadow evaluates a candidate configuration beside this one
	// (docs/callers-and-policy.md#trying-a-change-in-shadow-mode).
	Shadow Shadow `yaml:"shadow"`
}

// Shadow is shadow mode: a candidate configuration decides every request
// too, and only reports.
type Shadow struct {
	// ConfigFile is a second configuration file of the same schema; its
	// callers, policy, routes, rate_limit and upstream_budget sections are
	// the candidate. Reloaded like this file. Default none.
	ConfigFile string `yaml:"config_file"`
}

// Server is the proxy listener.
type Server struct {
	// Listen is the proxy address. Default ":8080".
	Listen string `yaml:"listen"`
	// MaxBodyBytes caps request bodies; larger ones get 413. Default 32 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ResendBufferBytes caps the memory all requests together hold in
	// copies of their bodies (up to 1 MiB each), forwarded or refused: kept
	// so that an upstream 401 can be answered by a resend, or read for the
	// IDs of an audit line. A body beyond it streams without a copy, and a
	// refused request's audit line goes without its IDs. Default 4 MiB.
	ResendBufferBytes int64 `yaml:"resend_buffer_bytes"`
	// ReadHeaderTimeout bounds reading request headers. Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout is the longest pause allowed between two reads of a request
	// body; a body that trickles slower is cut off with 408. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// IdleTimeout closes idle keep-alive connections. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ShutdownTimeout is the drain budget on SIGTERM. Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// TLS configures the proxy listener's TLS. Default mode "off".
	TLS TLS `yaml:"tls"`
}

// TLS is server.tls.
type TLS struct {
	// Mode is off, files or acme. Default "off".
	Mode string `yaml:"mode"`
	// MinVersion is the lowest TLS version accepted: "1.2" or "1.3".
	// Default "1.2".
	MinVersion string `yaml:"min_version"`
	// CertFile and KeyFile are the certificate for mode files, re-read when
	// either changes. Default none.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, when set, makes the listener verify client certificates
	// (mTLS) against the certificates it holds. Default none.
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth is optional (a client may present no certificate; one it
	// presents must verify, or the handshake fails: an invalid certificate
	// never falls back to another identity) or require (a handshake without
	// a valid client certificate fails). Default "optional".
	ClientAuth string `yaml:"client_auth"`
	// ACME configures mode acme (certmagic).
	ACME ACME `yaml:"acme"`
}

// ACME is server.tls.acme.
type ACME struct {
	// Domains are the names to obtain certificates for. Default none.
	Domains []string `yaml:"domains"`
	// Email is the ACME account's contact address. Default "".
	Email string `yaml:"email"`
	// Directory is the ACME directory URL; empty means the public default CA.
	Directory string `yaml:"directory"`
	// CARootFile is a trust root for a private ACME CA.
	CARootFile string `yaml:"ca_root_file"`
	// Storage is file or redis. Default "file".
	Storage string `yaml:"storage"`
	// StoragePath is the directory of storage "file"; default "" means
	// certmagic's: $XDG_DATA_HOME/certmagic, else ~/.local/share/certmagic.
	StoragePath string `yaml:"storage_path"`
	// HTTPListen is the address of the http-01 challenge listener; "" for
	// none (tls-alpn-01 is always answered on server.listen).
	HTTPListen string `yaml:"http_listen"`
}

// RuleSections are the sections that decide what a caller may do and how
// fast: the ones a reload replaces at once, compiled together into the
// rules of the request path.
type RuleSections struct {
	Callers        Callers
	Policy         Policy
	Routes         Routes
	RateLimit      RateLimit
	UpstreamBudget UpstreamBudget
	// KeyPrefix is redis.key_prefix, under which shared limits and
	// budget windows live.
	KeyPrefix string
}

// RuleSections returns c's rule sections.
func (c *Config) RuleSections() RuleSections {
	return RuleSections{Callers: c.Callers, Policy: c.Policy, Routes: c.Routes, RateLimit: c.RateLimit,
		UpstreamBudget: c.UpstreamBudget, KeyPrefix: c.Redis.KeyPrefix}
}

// Admin is the admin listener (/metrics, /healthz, /readyz).
type Admin struct {
	// Listen is the admin address. Default "127.0.0.1:9090".
	Listen string `yaml:"listen"`
	// Pprof exposes /debug/pprof/ on the admin listener and turns on the
	// block and mutex profiles at a modest rate while faxgate serves.
	// Default false.
	Pprof bool `yaml:"pprof"`
	// AllowedHosts are the host names, besides IP addresses and
	// "localhost", that the admin listener answers to (the Host header,
	// without its port, compared without regard to case); any other Host
	// gets 421, so a page that rebinds its own DNS name to the admin port
	// reads nothing. Default none.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// Upstream is the Customer API behind the gateway.
type Upstream struct {
	// BaseURL is the API's {base_url}; it may carry a path prefix. Required.
	BaseURL string `yaml:"base_url"`
	// APIKeyFile is a file holding the API secret; re-read when it changes.
	// Exactly one of APIKeyFile and APIKeyEnv is required.
	APIKeyFile string `yaml:"api_key_file"`
	// APIKeyEnv names an environment variable holding the API secret.
	APIKeyEnv string `yaml:"api_key_env"`
	// Timeout bounds the whole upstream exchange. Default 60s.
	Timeout time.Duration `yaml:"timeout"`
	// CAFile is an extra trust root for the upstream.
	CAFile string `yaml:"ca_file"`
	// MaxIdleConns bounds idle upstream connections. Default 256.
	MaxIdleConns int `yaml:"max_idle_conns"`
	// ProxyURL is the forward proxy every upstream request goes through,
	// /v1/auth included: "" (direct), an http:// or https:// URL of the
	// proxy (no credentials), or "env" for HTTPS_PROXY, HTTP_PROXY and
	// NO_PROXY by Go's rules. Default "".
	ProxyURL string `yaml:"proxy_url"`
	// ProxyAuthFile is a file holding "user:password" for the proxy
	// (Basic), re-read when it changes; sent only to the proxy. Default none.
	ProxyAuthFile string `yaml:"proxy_auth_file"`
	// RetryUnsent is how many times a request the upstream certainly never
	// received is sent again (docs/upstream-budget.md). Default 2.
	RetryUnsent int `yaml:"retry_unsent"`
}

// ProxyFromEnvironment is upstream.proxy_url's value that takes the proxy
// from HTTPS_PROXY, HTTP_PROXY and NO_PROXY.
const ProxyFromEnvironment = "env"

// Token configures how the Bearer token is obtained and renewed.
type Token struct {
	// Store is memory or redis. Default "memory".
	Store string `yaml:"store"`
	// RefreshBefore renews the token when less than this lifetime remains. Default 1h.
	RefreshBefore time.Duration `yaml:"refresh_before"`
	// RetryMin and RetryMax bound the backoff of a failing renewal. Defaults 1s and 5m.
	RetryMin time.Duration `yaml:"retry_min"`
	RetryMax time.Duration `yaml:"retry_max"`
}

// Redis is the Redis connection used by token.store, rate_limit.backend and
// tls.acme.storage.
type Redis struct {
	// Mode is how Addrs are read: auto, single, cluster or sentinel
	// (docs/deployment.md, Redis in production). auto: with MasterName the
	// addresses are sentinels, else one address is a single node and several
	// are cluster nodes. cluster with one address is a cluster's
	// configuration endpoint (managed services), the nodes discovered from
	// it. Default "auto"; EffectiveMode resolves it.
	Mode string `yaml:"mode"`
	// Addrs: the node, the cluster nodes (or one configuration endpoint), or
	// the sentinels, as Mode says. Default ["127.0.0.1:6379"].
	Addrs []string `yaml:"addrs"`
	// MasterName is the name the sentinels know the primary by; with mode
	// auto, setting it makes Addrs sentinels. Default "".
	MasterName string `yaml:"master_name"`
	// SentinelUsername is the ACL user for the sentinels themselves (they
	// may differ from the data nodes' Username); only with sentinel.
	// Default "" (none).
	SentinelUsername string `yaml:"sentinel_username"`
	// SentinelPasswordEnv names an environment variable holding the
	// sentinels' password (requirepass of sentinel.conf); only with
	// sentinel. Default "" (the sentinels take no password).
	SentinelPasswordEnv string `yaml:"sentinel_password_env"`
	// Username is the ACL user. Default "".
	Username string `yaml:"username"`
	// PasswordEnv names an environment variable holding the password.
	// Default "" (no password).
	PasswordEnv string `yaml:"password_env"`
	// DB is the database number (single node and sentinel). Default 0.
	DB int `yaml:"db"`
	// KeyPrefix prefixes every key faxgate writes. Default "faxgate:".
	KeyPrefix string `yaml:"key_prefix"`
	// TLS connects to Redis over TLS, the server's certificate verified
	// against the system roots and CAFile, for the host of each address.
	// Default false.
	TLS bool `yaml:"tls"`
	// CAFile is an extra trust root (PEM) for Redis over TLS; only with
	// TLS. Default "".
	CAFile string `yaml:"ca_file"`
}

// The values of redis.mode. ModeAuto is resolved by EffectiveMode into one
// of the other three.
const (
	RedisModeAuto     = "auto"
	RedisModeSingle   = "single"
	RedisModeCluster  = "cluster"
	RedisModeSentinel = "sentinel"
)

// EffectiveMode is the topology r describes: Mode when it is single,
// cluster or sentinel; for auto (or empty), sentinel when MasterName is
// set, cluster for several addresses, single otherwise.
func (r Redis) EffectiveMode() string {
	switch r.Mode {
	case RedisModeSingle, RedisModeCluster, RedisModeSentinel:
		return r.Mode
	}
	switch {
	case r.MasterName != "":
		return RedisModeSentinel
	case len(r.Addrs) > 1:
		return RedisModeCluster
	}
	return RedisModeSingle
}

// Callers says who callers are and what each may do.
type Callers struct {
	// IdentityHeader carries the caller's name from a trusted proxy. Default "X-Faxgate-Caller".
	IdentityHeader string `yaml:"identity_header"`
	// TrustedProxies are CIDRs whose IdentityHeader / X-Forwarded-Client-Cert is believed.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Unidentified is deny, or the name of a caller in List to treat unidentified callers as.
	// Default "deny".
	Unidentified string `yaml:"unidentified"`
	// List is the known callers.
	List []Caller `yaml:"list"`
}

// Caller is one entry of callers.list.
type Caller struct {
	// Name matches [a-z0-9-]{1,63}; it is used as a metric label.
	Name string `yaml:"name"`
	// CIDRs match the TCP peer's source address.
	CIDRs []string `yaml:"cidrs"`
	// SpiffeIDs match URI SANs of a verified client certificate.
	SpiffeIDs []string `yaml:"spiffe_ids"`
	// HeaderValues match callers.identity_header from a trusted proxy.
	HeaderValues []string `yaml:"header_values"`
	// Allow lists route names or globs ("numbers.*"); "*" never grants a sensitive route.
	Allow []string `yaml:"allow"`
	// RateLimit overrides rate_limit.default for this caller when set.
	RateLimit *Limit `yaml:"rate_limit"`
}

// Limit is a token-bucket rate: RPS requests per second with bursts of Burst.
type Limit struct {
	// RPS is the sustained rate, in requests per second; > 0.
	RPS float64 `yaml:"rps"`
	// Burst is the bucket size; >= 1.
	Burst int `yaml:"burst"`
}

// RateLimit configures per-caller rate limits.
type RateLimit struct {
	// Backend is local or redis. Default "local".
	Backend string `yaml:"backend"`
	// Default applies to callers without their own rate_limit. Default {rps: 20, burst: 40}.
	Default Limit `yaml:"default"`
	// ReplicasHint divides rps while Redis is unreachable (backend redis). Default 1.
	ReplicasHint int `yaml:"replicas_hint"`
}

// Routes configures route names beyond the built-in table.
type Routes struct {
	// Unmatched is allow or deny for paths under /v1/ that match no route. Default "allow".
	Unmatched string `yaml:"unmatched"`
	// Extra names more upstream routes.
	Extra []Route `yaml:"extra"`
}

// Route is a named upstream route: an entry of routes.extra or of BuiltinRoutes.
type Route struct {
	// Name is dotted lower-case words ("faxes.send"); it is used as a
	// metric label.
	Name string `yaml:"name"`
	// Method is GET, POST, PATCH, PUT or DELETE.
	Method string `yaml:"method"`
	// Path is under /v1/; a segment {name} matches any one segment.
	Path string `yaml:"path"`
}

// Policy is the gateway's access policy.
type Policy struct {
	// Sensitive routes are denied unless a caller's allow names them exactly.
	// Default ["numbers.delete"].
	Sensitive []string `yaml:"sensitive"`
	// Confirm routes need X-Faxgate-Confirm echoing the body's number_id.
	// Default ["numbers.delete"].
	Confirm []string `yaml:"confirm"`
	// AuthEndpoint is deny or shim. Default "deny".
	AuthEndpoint string `yaml:"auth_endpoint"`
}

// UpstreamBudget is upstream_budget: the vendor's request budget, shared
// fairly between callers, and the upstream's 429s honoured
// (docs/upstream-budget.md).
type UpstreamBudget struct {
	// HonorRetryAfter holds a route after an upstream 429 until its
	// Retry-After passes. Default true.
	HonorRetryAfter bool `yaml:"honor_retry_after"`
	// MaxHold caps a hold, whatever Retry-After says. Default 10m.
	MaxHold time.Duration `yaml:"max_hold"`
	// Limits are the vendor's limits. Default none.
	Limits []BudgetLimit `yaml:"limits"`
	// Shares are callers' fractions of every limit, by caller name. Default none.
	Shares map[string]Share `yaml:"shares"`
	// MaxWait, when above 0, makes a request that a hold or a limit would
	// refuse wait up to this long for its admission instead
	// (docs/upstream-budget.md, Waiting instead of refusing); at most
	// server.shutdown_timeout. Default 0s (refuse at once).
	MaxWait time.Duration `yaml:"max_wait"`
	// MaxWaiting bounds the requests waiting at once on one replica; beyond
	// it a request is refused at once. At least 1. Default 1000.
	MaxWaiting int `yaml:"max_waiting"`
	// RetryThrottled waits out an upstream 429 and sends the request again
	// when the hold ends, when its Retry-After fits in what is left of
	// max_wait and its body is held; needs max_wait > 0. Default false.
	RetryThrottled bool `yaml:"retry_throttled"`
}

// BudgetLimit is one of the vendor's limits: Requests per sliding window Per,
// counted per route name (scope route) or over every forwarded request
// (scope tenant).
type BudgetLimit struct {
	// Name labels the limit in metrics and GET /budget: [a-z0-9-]{1,63}.
	Name string `yaml:"name"`
	// Scope is route or tenant.
	Scope string `yaml:"scope"`
	// Requests is the window's size; > 0.
	Requests int `yaml:"requests"`
	// Per is the window's length; > 0.
	Per time.Duration `yaml:"per"`
}

// Share is a caller's part of every limit, as fractions of its requests.
type Share struct {
	// Reserve, in [0, 1], is kept for the caller even while it is idle:
	// floor(reserve x requests) of each limit. Default 0.
	Reserve float64 `yaml:"reserve"`
	// Cap, in (0, 1], is a ceiling: the caller never uses more than
	// floor(cap x requests) of a limit. Default none (the whole limit).
	Cap *float64 `yaml:"cap"`
}

// Tracing is the tracing section: OpenTelemetry spans exported over
// OTLP/HTTP (docs/tracing.md). Endpoint empty leaves tracing off.
type Tracing struct {
	// Endpoint is the OTLP/HTTP base URL (http or https, no credentials,
	// query or fragment); spans go to its path + /v1/traces. Default ""
	// (off).
	Endpoint string `yaml:"endpoint"`
	// SampleRatio, in [0, 1], is the share of requests traced among those
	// that arrive without a traceparent; a traceparent's sampled flag
	// decides for the others. Default 0.05.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the resource's service.name. Default "faxgate".
	ServiceName string `yaml:"service_name"`
	// HeadersEnv names an environment variable holding the OTLP headers
	// ("k1=v1,k2=v2", e.g. an authorization for the collector); its value
	// is a secret and is never printed. Default "" (no headers).
	HeadersEnv string `yaml:"headers_env"`
}

// Enabled reports whether traces are exported.
func (t Tracing) Enabled() bool { return t.Endpoint != "" }

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `yaml:"level"`
	// Format is json or console. Default "json".
	Format string `yaml:"format"`
}

// Default returns the configuration with every default that
// docs/configuration.md lists filled in; upstream.base_url and the key
// source are left empty (required).
func Default() Config {
	return Config{
		Server: Server{
			Listen:            ":8080",
			MaxBodyBytes:      32 << 20,
			ResendBufferBytes: 4 << 20,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			IdleTimeout:       120 * time.Second,
			ShutdownTimeout:   30 * time.Second,
			TLS:               TLS{Mode: "off", MinVersion: "1.2", ClientAuth: "optional", ACME: ACME{Storage: "file"}},
		},
		Admin:    Admin{Listen: "127.0.0.1:9090"},
		Upstream: Upstream{Timeout: 60 * time.Second, MaxIdleConns: 256, RetryUnsent: 2},
		Token: Token{
			Store:         "memory",
			RefreshBefore: time.Hour,
			RetryMin:      time.Second,
			RetryMax:      5 * time.Minute,
		},
		Redis: Redis{Mode: RedisModeAuto, Addrs: []string{"127.0.0.1:6379"}, KeyPrefix: "faxgate:"},
		Callers: Callers{
			IdentityHeader: "X-Faxgate-Caller",
			Unidentified:   "deny",
		},
		RateLimit: RateLimit{Backend: "local", Default: Limit{RPS: 20, Burst: 40}, ReplicasHint: 1},
		Routes:    Routes{Unmatched: "allow"},
		Policy: Policy{
			Sensitive:    []string{"numbers.delete"},
			Confirm:      []string{"numbers.delete"},
			AuthEndpoint: "deny",
		},
		UpstreamBudget: UpstreamBudget{HonorRetryAfter: true, MaxHold: 10 * time.Minute, MaxWaiting: 1000},
		Tracing:        Tracing{SampleRatio: 0.05, ServiceName: "faxgate"},
		Log:            Log{Level: "info", Format: "json"},
	}
}
