package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// validateServer checks server: the proxy listener, its limits and
// timeouts, and server.tls.
func (v *validator) validateServer(s Server) {
	v.listen("server.listen", s.Listen)
	if s.MaxBodyBytes <= 0 {
		v.add("server.max_body_bytes", "must be greater than 0, got %s", v.qint("server.max_body_bytes", s.MaxBodyBytes))
	}
	if s.ResendBufferBytes < 0 {
		v.add("server.resend_buffer_bytes", "must be 0 or more, got %s", v.qint("server.resend_buffer_bytes", s.ResendBufferBytes))
	}
	v.positive("server.read_header_timeout", s.ReadHeaderTimeout)
	v.positive("server.read_timeout", s.ReadTimeout)
	v.positive("server.idle_timeout", s.IdleTimeout)
	v.positive("server.shutdown_timeout", s.ShutdownTimeout)

	t := s.TLS
	v.oneOf("server.tls.mode", t.Mode, "off", "files", "acme")
	v.oneOf("server.tls.min_version", t.MinVersion, "1.2", "1.3")
	if t.Mode == "files" {
		if t.CertFile == "" {
			v.add("server.tls.cert_file", `required with server.tls.mode "files"`)
		}
		if t.KeyFile == "" {
			v.add("server.tls.key_file", `required with server.tls.mode "files"`)
		}
	} else {
		if t.CertFile != "" {
			v.add("server.tls.cert_file", `only used with server.tls.mode "files"`)
		}
		if t.KeyFile != "" {
			v.add("server.tls.key_file", `only used with server.tls.mode "files"`)
		}
	}
	v.file("server.tls.cert_file", t.CertFile)
	v.file("server.tls.key_file", t.KeyFile)
	v.file("server.tls.client_ca_file", t.ClientCAFile)
	// A client CA on a plaintext listener would verify nothing: refused
	// rather than ignored, so nobody believes callers are verified.
	if t.ClientCAFile != "" && t.Mode == "off" {
		v.add("server.tls.client_ca_file", `needs server.tls.mode "files" or "acme"`)
	}
	if v.oneOf("server.tls.client_auth", t.ClientAuth, "optional", "require") &&
		t.ClientAuth == "require" && t.ClientCAFile == "" {
		v.add("server.tls.client_auth", `"require" needs server.tls.client_ca_file to verify certificates against`)
	}
	if t.Mode != "acme" {
		// Every acme key is refused outside mode acme rather than
		// ignored, so nobody believes a certificate is being obtained.
		a := t.ACME
		for _, k := range []struct {
			key string
			set bool
		}{
			{"domains", len(a.Domains) > 0},
			{"email", a.Email != ""},
			{"directory", a.Directory != ""},
			{"ca_root_file", a.CARootFile != ""},
			{"storage", a.Storage == "redis"},
			{"storage_path", a.StoragePath != ""},
			{"http_listen", a.HTTPListen != ""},
		} {
			if k.set {
				v.add("server.tls.acme."+k.key, `only used with server.tls.mode "acme"`)
			}
		}
	}
	if t.Mode == "off" && t.MinVersion == "1.3" {
		v.add("server.tls.min_version", `needs server.tls.mode "files" or "acme"`)
	}
	v.oneOf("server.tls.acme.storage", t.ACME.Storage, "file", "redis")
	v.file("server.tls.acme.ca_root_file", t.ACME.CARootFile)
	v.file("server.tls.acme.storage_path", t.ACME.StoragePath)
	if t.Mode == "acme" {
		v.validateACME(t.ACME)
	}
	if ls := serverListeners(s); len(ls) > 1 {
		v.ownAddress(ls[1], ls[:1])
	}
}

// validateACME checks server.tls.acme for mode acme: the names to obtain a
// certificate for, and where to obtain it from.
func (v *validator) validateACME(a ACME) {
	if len(a.Domains) == 0 {
		v.add("server.tls.acme.domains", `required with server.tls.mode "acme"`)
	}
	seen := map[string]bool{}
	for i, d := range a.Domains {
		p := fmt.Sprintf("server.tls.acme.domains[%d]", i)
		switch {
		case !validDNSName(d):
			// Wildcards need dns-01, which faxgate does not offer; IP
			// addresses are refused by the public CAs' policies.
			v.add(p, "invalid DNS name %s (want a host name such as api.example.com; no wildcard, no IP address)", v.q(p, d))
		case seen[strings.ToLower(d)]:
			v.add(p, "duplicate domain %s", v.q(p, d))
		}
		seen[strings.ToLower(d)] = true
	}
	if a.Directory != "" {
		u, err := url.Parse(a.Directory)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
			v.add("server.tls.acme.directory", "invalid ACME directory URL %s (want https://host/path, or empty for the public default CA)", v.q("server.tls.acme.directory", a.Directory))
		}
	}
	if a.HTTPListen != "" {
		v.listen("server.tls.acme.http_listen", a.HTTPListen)
	}
	if a.Storage == "redis" && a.StoragePath != "" {
		v.add("server.tls.acme.storage_path", `only used with server.tls.acme.storage "file"`)
	}
}

// validDNSName reports whether s is a host name: dot-separated labels of
// letters, digits and inner hyphens, 63 bytes each, 253 in all.
func validDNSName(s string) bool {
	if s == "" || len(s) > 253 || net.ParseIP(s) != nil {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// validateAdmin checks admin: its listener, which must not share an address
// with the server's.
func (v *validator) validateAdmin(a Admin, s Server) {
	v.listen("admin.listen", a.Listen)
	v.ownAddress(listener{"admin.listen", a.Listen}, serverListeners(s))
	for i, h := range a.AllowedHosts {
		if !validHostName(h) {
			v.add(fmt.Sprintf("admin.allowed_hosts[%d]", i), "%q is not a host name (letters, digits, '-' and '.', no port or scheme)", h)
		}
	}
}

// validHostName reports whether h is a DNS name as a Host header carries it:
// labels of letters, digits and '-', separated by dots, at most 253 bytes.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
