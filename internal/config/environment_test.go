package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// envSecret is the content of key files and the value of secret variables
// in these tests: no problem may hold it.
const envSecret = "sk_live_env-Secret-0042"

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// selfSigned returns a PEM certificate and its PEM private key.
func selfSigned(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

func TestCheckEnvironment(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t)
	otherCert, _ := selfSigned(t)
	key := writeFile(t, dir, "key", envSecret+"\n")
	empty := writeFile(t, dir, "empty", "")
	blank := writeFile(t, dir, "blank", " \n\t\n")
	ca := writeFile(t, dir, "ca.pem", certPEM)
	notPEM := writeFile(t, dir, "not.pem", envSecret)
	keyOnly := writeFile(t, dir, "key.pem", keyPEM)
	badCert := writeFile(t, dir, "bad.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	other := writeFile(t, dir, "other.pem", otherCert)
	missing := filepath.Join(dir, "missing")
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"KEY": envSecret, "EMPTY": "", "BLANK": "  ", "REDIS_PW": envSecret, "REDIS_EMPTY": ""}[name]
		return v, ok
	}
	q := func(s string) string { return `"` + s + `"` }
	for _, tc := range []struct {
		name   string
		modify func(c *Config)
		want   []string
	}{
		{"key file", func(c *Config) {}, nil},
		{"key env", func(c *Config) { c.Upstream.APIKeyFile, c.Upstream.APIKeyEnv = "", "KEY" }, nil},
		{"key file missing", func(c *Config) { c.Upstream.APIKeyFile = missing },
			[]string{"upstream.api_key_file: cannot read " + q(missing) + ": no such file or directory"}},
		{"key file is a directory", func(c *Config) { c.Upstream.APIKeyFile = dir },
			[]string{"upstream.api_key_file: cannot read " + q(dir) + ": is a directory"}},
		{"key file empty", func(c *Config) { c.Upstream.APIKeyFile = empty },
			[]string{"upstream.api_key_file: " + q(empty) + " is empty"}},
		{"key file blank", func(c *Config) { c.Upstream.APIKeyFile = blank },
			[]string{"upstream.api_key_file: " + q(blank) + " is empty"}},
		{"key env unset", func(c *Config) { c.Upstream.APIKeyFile, c.Upstream.APIKeyEnv = "", "NOPE" },
			[]string{`upstream.api_key_env: environment variable "NOPE" is not set`}},
		{"key env empty", func(c *Config) { c.Upstream.APIKeyFile, c.Upstream.APIKeyEnv = "", "EMPTY" },
			[]string{`upstream.api_key_env: environment variable "EMPTY" is empty`}},
		{"key env blank", func(c *Config) { c.Upstream.APIKeyFile, c.Upstream.APIKeyEnv = "", "BLANK" },
			[]string{`upstream.api_key_env: environment variable "BLANK" is empty`}},
		{"ca file", func(c *Config) { c.Upstream.CAFile = ca }, nil},
		{"ca file missing", func(c *Config) { c.Upstream.CAFile = missing },
			[]string{"upstream.ca_file: cannot read " + q(missing) + ": no such file or directory"}},
		{"ca file not PEM", func(c *Config) { c.Upstream.CAFile = notPEM },
			[]string{"upstream.ca_file: " + q(notPEM) + " holds no PEM certificate"}},
		{"ca file holds a key", func(c *Config) { c.Upstream.CAFile = keyOnly },
			[]string{"upstream.ca_file: " + q(keyOnly) + " holds no PEM certificate"}},
		{"ca file certificate does not parse", func(c *Config) { c.Upstream.CAFile = badCert },
			[]string{"upstream.ca_file: " + q(badCert) + " holds no PEM certificate"}},
		{"redis password unset, redis unused", func(c *Config) { c.Redis.PasswordEnv = "NOPE" }, nil},
		{"redis password unset, token store", func(c *Config) { c.Redis.PasswordEnv = "NOPE"; c.Token.Store = "redis" },
			[]string{`redis.password_env: environment variable "NOPE" is not set`}},
		{"redis password unset, rate limits", func(c *Config) { c.Redis.PasswordEnv = "NOPE"; c.RateLimit.Backend = "redis" },
			[]string{`redis.password_env: environment variable "NOPE" is not set`}},
		{"redis password set", func(c *Config) { c.Redis.PasswordEnv = "REDIS_PW"; c.Token.Store = "redis" }, nil},
		{"redis password set empty", func(c *Config) { c.Redis.PasswordEnv = "REDIS_EMPTY"; c.Token.Store = "redis" }, nil},
		{"sentinel password unset, redis unused", func(c *Config) { c.Redis.MasterName, c.Redis.SentinelPasswordEnv = "m", "NOPE" }, nil},
		{"sentinel password unset, token store", func(c *Config) {
			c.Redis.MasterName, c.Redis.SentinelPasswordEnv, c.Token.Store = "m", "NOPE", "redis"
		}, []string{`redis.sentinel_password_env: environment variable "NOPE" is not set`}},
		{"sentinel and data passwords unset", func(c *Config) {
			c.Redis.MasterName, c.Redis.SentinelPasswordEnv, c.Redis.PasswordEnv, c.RateLimit.Backend = "m", "NOPE1", "NOPE2", "redis"
		}, []string{`redis.sentinel_password_env: environment variable "NOPE1" is not set`,
			`redis.password_env: environment variable "NOPE2" is not set`}},
		{"sentinel password set", func(c *Config) {
			c.Redis.MasterName, c.Redis.SentinelPasswordEnv, c.Token.Store = "m", "REDIS_PW", "redis"
		}, nil},
		{"sentinel password set empty", func(c *Config) {
			c.Redis.MasterName, c.Redis.SentinelPasswordEnv, c.Token.Store = "m", "REDIS_EMPTY", "redis"
		}, nil},
		{"redis ca file", func(c *Config) { c.Token.Store, c.Redis.TLS, c.Redis.CAFile = "redis", true, ca }, nil},
		{"redis ca file not PEM", func(c *Config) { c.Token.Store, c.Redis.TLS, c.Redis.CAFile = "redis", true, notPEM },
			[]string{"redis.ca_file: " + q(notPEM) + " holds no PEM certificate"}},
		{"redis ca file holds a key", func(c *Config) { c.RateLimit.Backend, c.Redis.TLS, c.Redis.CAFile = "redis", true, keyOnly },
			[]string{"redis.ca_file: " + q(keyOnly) + " holds no PEM certificate"}},
		{"redis ca file missing", func(c *Config) { c.Token.Store, c.Redis.TLS, c.Redis.CAFile = "redis", true, missing },
			[]string{"redis.ca_file: cannot read " + q(missing) + ": no such file or directory"}},
		{"redis ca file, acme storage", func(c *Config) {
			c.Server.TLS.Mode, c.Server.TLS.ACME.Storage, c.Redis.TLS, c.Redis.CAFile = "acme", "redis", true, badCert
		}, []string{"redis.ca_file: " + q(badCert) + " holds no PEM certificate"}},
		{"redis ca file, redis unused", func(c *Config) { c.Redis.TLS, c.Redis.CAFile = true, missing }, nil},
		{"tls files", func(c *Config) {
			c.Server.TLS.Mode, c.Server.TLS.CertFile, c.Server.TLS.KeyFile = "files", ca, keyOnly
		}, nil},
		{"tls files not a pair", func(c *Config) {
			c.Server.TLS.Mode, c.Server.TLS.CertFile, c.Server.TLS.KeyFile = "files", other, keyOnly
		}, []string{"server.tls.cert_file: " + q(other) + " and " + q(keyOnly) + " are not a certificate and key pair: private key does not match public key"}},
		{"tls files missing", func(c *Config) {
			c.Server.TLS.Mode, c.Server.TLS.CertFile, c.Server.TLS.KeyFile = "files", missing, missing
		}, []string{"server.tls.cert_file: cannot read " + q(missing) + ": no such file or directory",
			"server.tls.key_file: cannot read " + q(missing) + ": no such file or directory"}},
		{"tls off ignores its files", func(c *Config) {
			c.Server.TLS.CertFile, c.Server.TLS.KeyFile, c.Server.TLS.ClientCAFile = missing, missing, missing
			c.Server.TLS.ACME.CARootFile = missing
		}, nil},
		{"client ca", func(c *Config) {
			c.Server.TLS.Mode, c.Server.TLS.CertFile, c.Server.TLS.KeyFile, c.Server.TLS.ClientCAFile = "files", ca, keyOnly, notPEM
		}, []string{"server.tls.client_ca_file: " + q(notPEM) + " holds no PEM certificate"}},
		{"acme ca root", func(c *Config) { c.Server.TLS.Mode, c.Server.TLS.ACME.CARootFile = "acme", missing },
			[]string{"server.tls.acme.ca_root_file: cannot read " + q(missing) + ": no such file or directory"}},
		{"acme redis storage uses redis", func(c *Config) {
			c.Server.TLS.Mode, c.Server.TLS.ACME.Storage, c.Redis.PasswordEnv = "acme", "redis", "NOPE"
		}, []string{`redis.password_env: environment variable "NOPE" is not set`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			c.Upstream.APIKeyFile = key
			tc.modify(c)
			var got []string
			for _, p := range CheckEnvironment(c, env) {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if strings.Contains(strings.Join(got, "\n"), envSecret) {
				t.Errorf("a problem prints a secret:\n%s", strings.Join(got, "\n"))
			}
		})
	}
}

func TestCheckEnvironmentUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		// root reads any file; the missing-file and directory cases cover
		// the same path through the code.
		t.Skip("running as root: a mode 000 file is still readable")
	}
	p := writeFile(t, t.TempDir(), "key", envSecret)
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	c := validConfig()
	c.Upstream.APIKeyFile = p
	ps := CheckEnvironment(c, nil)
	if want := `upstream.api_key_file: cannot read "` + p + `": permission denied`; len(ps) != 1 || ps[0].String() != want {
		t.Errorf("got %v, want %s", ps, want)
	}
}

func TestCheckEnvironmentNilGetenv(t *testing.T) {
	c := validConfig()
	c.Upstream.APIKeyFile, c.Upstream.APIKeyEnv = "", "FAXGATE_API_KEY"
	ps := CheckEnvironment(c, nil)
	if len(ps) != 1 || ps[0].Path != "upstream.api_key_env" {
		t.Errorf("CheckEnvironment(nil getenv) = %v, want the variable reported unset", ps)
	}
	if ps := CheckEnvironment(nil, nil); ps != nil {
		t.Errorf("CheckEnvironment(nil) = %v", ps)
	}
}

// TestLoadAndCheck: file and environment problems come together, in file
// order, quoting ${NAME} as written; a field already refused by validation
// gets no second line.
func TestLoadAndCheck(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing-ca.pem")
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"KEY_FILE": filepath.Join(dir, "no-key"), "CA": missing, "SECRET": envSecret}[name]
		return v, ok
	}
	file := writeFile(t, dir, "faxgate.yaml", `
server:
  listen: "nope"
upstream:
  base_url: https://api.example.com
  api_key_file: "${KEY_FILE}"
  ca_file: "${CA}"
token:
  store: redis
redis:
  password_env: REDIS_PASSWORD
callers:
  list:
    - name: a
      cidrs: ["::ffff:10.0.0.0/8"]
`)
	cfg, err := LoadAndCheck(file, env)
	var ps Problems
	if cfg != nil || !errors.As(err, &ps) {
		t.Fatalf("LoadAndCheck = %v, %v; want nil and Problems", cfg, err)
	}
	want := `server.listen: invalid address "nope" (want host:port, port 0-65535)
upstream.api_key_file: cannot read "${KEY_FILE}": no such file or directory
upstream.ca_file: cannot read "${CA}": no such file or directory
redis.password_env: environment variable "REDIS_PASSWORD" is not set
callers.list[0].cidrs[0]: invalid CIDR "::ffff:10.0.0.0/8" (an IPv4-mapped prefix needs at least /96)`
	if got := ps.Error(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}

	// Load alone reads neither the files nor the variables.
	_, err = Load(file, env)
	if !errors.As(err, &ps) || len(ps) != 2 {
		t.Errorf("Load = %v; want the two validation problems only", err)
	}

	// A blank file name or a bad variable name is reported once.
	file = writeFile(t, dir, "blank.yaml", "upstream:\n  base_url: https://api.example.com\n  api_key_env: \"api-key\"\n  ca_file: \" \"\n")
	_, err = LoadAndCheck(file, env)
	want = `upstream.api_key_env: invalid environment variable name "api-key"
upstream.ca_file: must not be blank`
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}

	// A valid file in a complete environment loads.
	key := writeFile(t, dir, "key", envSecret)
	file = writeFile(t, dir, "ok.yaml", "upstream:\n  base_url: https://api.example.com\n  api_key_file: "+key+"\n")
	if cfg, err := LoadAndCheck(file, env); err != nil || cfg == nil || cfg.Upstream.APIKeyFile != key {
		t.Errorf("LoadAndCheck(valid) = %v, %v", cfg, err)
	}
	if _, err := LoadAndCheck(filepath.Join(dir, "nope.yaml"), env); err == nil || errors.As(err, &ps) {
		t.Errorf("LoadAndCheck(missing file) = %v, want an os error", err)
	}
}

// TestCheckEnvironmentExpiredCertificate: an expired server certificate is
// refused with its path and expiry, never with its content.
func TestCheckEnvironmentExpiredCertificate(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t) // valid from an hour ago to an hour ahead
	cert := writeFile(t, dir, "tls.crt", certPEM)
	key := writeFile(t, dir, "tls.key", keyPEM)
	c := validConfig()
	c.Upstream.APIKeyEnv, c.Upstream.APIKeyFile = "KEY", ""
	c.Server.TLS.Mode, c.Server.TLS.CertFile, c.Server.TLS.KeyFile = "files", cert, key
	env := func(string) (string, bool) { return envSecret, true }

	v := &validator{now: func() time.Time { return time.Now().Add(2 * time.Hour) }}
	v.environment(c, env)
	if len(v.problems) != 1 || v.problems[0].Path != "server.tls.cert_file" ||
		!strings.Contains(v.problems[0].Message, `"`+cert+`" expired at `) {
		t.Fatalf("two hours on: got %v, want one expiry problem at server.tls.cert_file", v.problems)
	}
	if s := v.problems[0].String(); strings.Contains(s, "BEGIN") || strings.Contains(s, "\n") {
		t.Errorf("problem is not one line without PEM: %q", s)
	}
	if p := CheckEnvironment(c, env); len(p) != 0 {
		t.Errorf("now: got %v, want none", p)
	}
}
