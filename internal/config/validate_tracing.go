package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// validateTracing checks tracing (docs/tracing.md). Its keys are checked
// whether or not an endpoint is set, so that a file that turns tracing on
// later holds no surprise.
func (v *validator) validateTracing(t Tracing) {
	if t.Endpoint != "" {
		v.otlpEndpoint("tracing.endpoint", t.Endpoint)
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) { // NaN too
		v.add("tracing.sample_ratio", "must be between 0 and 1, got %s", v.qfloat("tracing.sample_ratio", t.SampleRatio))
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		v.add("tracing.service_name", "must not be empty")
	}
	v.envName("tracing.headers_env", t.HeadersEnv)
}

// otlpEndpoint checks an OTLP/HTTP base URL: an absolute http(s) URL with a
// host, and no credentials (they belong in headers_env), query or fragment.
func (v *validator) otlpEndpoint(path, s string) {
	v.httpBaseURL(path, s, baseURLRules{
		credentials: "put an authorization in the variable headers_env names",
		example:     "the OTLP/HTTP base URL, e.g. http://otel-collector:4318",
	})
}

// ParseOTLPHeaders reads the value of tracing.headers_env: comma-separated
// key=value pairs, as OTEL_EXPORTER_OTLP_HEADERS has them (values
// percent-decoded, surrounding white space trimmed). An error never holds a
// value: the values are credentials.
func ParseOTLPHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("is empty (want key=value pairs separated by commas)")
	}
	for i, pair := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return nil, fmt.Errorf("pair %d has no '=' (want key=value pairs separated by commas)", i+1)
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("pair %d: the key is not a valid HTTP header name", i+1)
		}
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("pair %d (%s): the value is not valid percent-encoding", i+1, k)
		}
		if !httpguts.ValidHeaderFieldValue(dec) {
			return nil, fmt.Errorf("pair %d (%s): the value is not a valid HTTP header value", i+1, k)
		}
		h[k] = dec
	}
	return h, nil
}

// tracingHeaders checks the variable tracing.headers_env names, as serve
// reads it when tracing is on: set, and well formed.
func (v *validator) tracingHeaders(t Tracing, getenv func(string) (string, bool)) {
	if !t.Enabled() || t.HeadersEnv == "" {
		return
	}
	const path = "tracing.headers_env"
	val, ok := getenv(t.HeadersEnv)
	if !ok {
		v.add(path, "environment variable %s is not set", v.q(path, t.HeadersEnv))
		return
	}
	if _, err := ParseOTLPHeaders(val); err != nil {
		v.add(path, "environment variable %s %s", v.q(path, t.HeadersEnv), err.Error())
	}
}
