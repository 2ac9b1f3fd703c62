package config

import (
	"reflect"
	"strings"
	"testing"
)

// check refuses a tracing headers variable that serve could not use, and
// never prints its value (docs/tracing.md).
func TestTracingHeadersEnvironment(t *testing.T) {
	for _, c := range []struct {
		name     string
		endpoint string
		env      map[string]string
		want     string // "" for no problem
	}{
		{"set and well formed", "http://collector:4318", map[string]string{"OTLP_HEADERS": "Authorization=Bearer%20" + envSecret + ",X-Tenant=a"}, ""},
		{"unset", "http://collector:4318", nil, `tracing.headers_env: environment variable "OTLP_HEADERS" is not set`},
		{"blank", "http://collector:4318", map[string]string{"OTLP_HEADERS": "  "}, `tracing.headers_env: environment variable "OTLP_HEADERS" is empty (want key=value pairs separated by commas)`},
		{"no equals", "http://collector:4318", map[string]string{"OTLP_HEADERS": "Authorization " + envSecret}, `tracing.headers_env: environment variable "OTLP_HEADERS" pair 1 has no '=' (want key=value pairs separated by commas)`},
		{"bad key", "http://collector:4318", map[string]string{"OTLP_HEADERS": "a=b,bad key=" + envSecret}, `tracing.headers_env: environment variable "OTLP_HEADERS" pair 2: the key is not a valid HTTP header name`},
		{"bad escape", "http://collector:4318", map[string]string{"OTLP_HEADERS": "Authorization=" + envSecret + "%zz"}, `tracing.headers_env: environment variable "OTLP_HEADERS" pair 1 (Authorization): the value is not valid percent-encoding`},
		{"newline", "http://collector:4318", map[string]string{"OTLP_HEADERS": "Authorization=" + envSecret + "%0d%0aX: y"}, `tracing.headers_env: environment variable "OTLP_HEADERS" pair 1 (Authorization): the value is not a valid HTTP header value`},
		// With tracing off the variable is never read, so it need not exist.
		{"tracing off", "", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			cfg.Tracing.Endpoint = c.endpoint
			cfg.Tracing.HeadersEnv = "OTLP_HEADERS"
			ps := CheckEnvironment(&cfg, func(n string) (string, bool) { v, ok := c.env[n]; return v, ok })
			var got []string
			for _, p := range ps {
				if strings.HasPrefix(p.Path, "tracing.") {
					got = append(got, p.String())
				}
			}
			var want []string
			if c.want != "" {
				want = []string{c.want}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("problems = %q, want %q", got, want)
			}
			if strings.Contains(strings.Join(got, "\n"), envSecret) {
				t.Errorf("a problem prints the headers' value: %q", got)
			}
		})
	}
}

func TestParseOTLPHeaders(t *testing.T) {
	got, err := ParseOTLPHeaders(" Authorization = Basic%20dTpw , x-scope-orgid=tenant%2C1 ")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Authorization": "Basic dTpw", "x-scope-orgid": "tenant,1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseOTLPHeaders = %q, want %q", got, want)
	}
}
