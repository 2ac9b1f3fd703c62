package config

import (
	"strings"
	"testing"
)

// TestCheckEnvironmentProxy: check reads the proxy's credentials file as the
// transport does, and the variables of proxy_url "env"; no problem repeats a
// credential.
func TestCheckEnvironmentProxy(t *testing.T) {
	dir := t.TempDir()
	const secret = "pr0xy-Secret-77"
	good := writeFile(t, dir, "good", "faxgate:"+secret+"\n")
	noColon := writeFile(t, dir, "nocolon", secret+"\n")
	noUser := writeFile(t, dir, "nouser", ":"+secret+"\n")
	twoLines := writeFile(t, dir, "twolines", "faxgate:"+secret+"\nother:"+secret+"\n")
	empty := writeFile(t, dir, "empty", "  \n")
	for _, tc := range []struct {
		name string
		up   Upstream
		env  map[string]string
		want string
	}{
		{"good file", Upstream{ProxyURL: "http://proxy:3128", ProxyAuthFile: good}, nil, ""},
		{"no colon", Upstream{ProxyURL: "http://proxy:3128", ProxyAuthFile: noColon}, nil,
			`upstream.proxy_auth_file: "` + noColon + `" does not hold "user:password"`},
		{"no user", Upstream{ProxyURL: "http://proxy:3128", ProxyAuthFile: noUser}, nil,
			`upstream.proxy_auth_file: "` + noUser + `" does not hold "user:password"`},
		{"two lines", Upstream{ProxyURL: "http://proxy:3128", ProxyAuthFile: twoLines}, nil,
			`upstream.proxy_auth_file: "` + twoLines + `" holds more than one line; want "user:password"`},
		{"empty", Upstream{ProxyURL: "http://proxy:3128", ProxyAuthFile: empty}, nil,
			`upstream.proxy_auth_file: "` + empty + `" is empty`},
		{"missing", Upstream{ProxyURL: "http://proxy:3128", ProxyAuthFile: dir + "/nope"}, nil,
			`upstream.proxy_auth_file: cannot read "` + dir + `/nope": no such file or directory`},
		{"env unset", Upstream{ProxyURL: "env"}, nil, ""},
		{"env good", Upstream{ProxyURL: "env"}, map[string]string{"HTTPS_PROXY": "http://u:" + secret + "@proxy:3128", "NO_PROXY": ".svc"}, ""},
		{"env host:port", Upstream{ProxyURL: "env"}, map[string]string{"https_proxy": "proxy.corp:3128"}, ""},
		{"env bad", Upstream{ProxyURL: "env"}, map[string]string{"HTTPS_PROXY": "ftp://u:" + secret + "@proxy:21"},
			`upstream.proxy_url: environment variable HTTPS_PROXY is not a proxy URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Upstream.BaseURL, c.Upstream.APIKeyEnv = "https://api.example.com", "K"
			c.Upstream.ProxyURL, c.Upstream.ProxyAuthFile = tc.up.ProxyURL, tc.up.ProxyAuthFile
			env := map[string]string{"K": "k"}
			for k, v := range tc.env {
				env[k] = v
			}
			ps := CheckEnvironment(&c, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
				if strings.Contains(p.String(), secret) {
					t.Errorf("a problem repeats the credential: %s", p)
				}
			}
			if strings.Join(got, "\n") != tc.want {
				t.Errorf("problems %q, want %q", got, tc.want)
			}
		})
	}
}
