package mixin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/faxgate/faxgate/internal/config"
)

// The Helm chart's schema for its config value is generated from the
// configuration types themselves, so that a key faxgate accepts is a key the
// chart accepts the day it is added (docs/deployment.md): make mixin rewrites
// it, and a test fails while the chart's copy is stale.
//
// It follows what the decoder (internal/config) accepts, never less: every
// scalar is read from its text, after ${NAME} expansion, so a string field
// takes a number or a boolean too, a number or a boolean takes a string
// ("${PORT}"), and null leaves any key at its default. What it refuses is
// what the decoder refuses for its shape: an unknown key, a mapping or a list
// where a single value belongs, and the other way round. Values are left to
// `faxgate check`, but for the few the chart itself must read (chartOverlay).

// chartOwned are the keys the chart sets from its own values; config must
// not set them. Each maps to the value that owns it.
var chartOwned = map[string]string{
	"server.listen":               "the container port 8080",
	"admin.listen":                "the container port 9090",
	"upstream.api_key_file":       "apiKey",
	"upstream.api_key_env":        "apiKey",
	"redis.password_env":          "redisPassword",
	"redis.sentinel_password_env": "redisSentinelPassword",
	"server.tls.mode":             "tls.existingSecret",
	"server.tls.cert_file":        "tls.existingSecret",
	"server.tls.key_file":         "tls.existingSecret",
	"server.tls.client_ca_file":   "tls.clientCASecret",
	"upstream.proxy_auth_file":    "proxyAuth",
	"shadow.config_file":          "shadowConfig",
}

// ChartOwned returns the config keys the chart sets from its own values
// (YAML paths, sorted): config must not set them.
func ChartOwned() []string {
	keys := make([]string, 0, len(chartOwned))
	for k := range chartOwned {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// chartOverlay narrows the generated schema where the chart reads a value
// itself, or where a wrong value would render a broken release rather than
// one that `faxgate check` refuses at start.
func chartOverlay(path string, s map[string]any) {
	switch path {
	case "token.store":
		s["enum"] = []any{"memory", "redis", nil}
	case "rate_limit.backend":
		s["enum"] = []any{"local", "redis", nil}
	case "upstream":
		s["required"] = []string{"base_url"}
	case "redis.mode":
		s["enum"] = []any{"auto", "single", "cluster", "sentinel", nil}
	case "redis":
		// The chart renders the sentinel's password from its own value;
		// a Sentinel release without master_name would never start.
		s["if"] = map[string]any{"properties": map[string]any{"mode": map[string]any{"const": "sentinel"}}, "required": []string{"mode"}}
		s["then"] = map[string]any{"required": []string{"master_name"}}
	case "upstream.base_url":
		s["type"] = []string{"string"}
		s["minLength"] = 1
		s["description"] = "the {base_url} of the Customer API (required)"
	}
}

// ConfigSchema is the JSON schema (draft-07) of the chart's config value.
func ConfigSchema() map[string]any {
	s := schemaOf(reflect.TypeOf(config.Config{}), "")
	s["type"] = "object"
	s["description"] = "faxgate's configuration (docs/configuration.md), generated from its Go types by make mixin; faxgate check validates the values"
	s["required"] = []string{"upstream"}
	return s
}

// ShadowConfigSchema is the JSON schema of the chart's shadowConfig value:
// changes to config in the sections a shadow candidate brings
// (config.CandidateSections), each with its schema in ConfigSchema, merged
// over config by the chart. No key is required (the rest comes from config);
// any other section of faxgate's configuration is refused with a message
// saying so, since faxgate would not read it from the candidate.
func ShadowConfigSchema() map[string]any {
	all := ConfigSchema()["properties"].(map[string]any)
	cs := config.CandidateSections
	sections := strings.Join(cs[:len(cs)-1], ", ") + " and " + cs[len(cs)-1]
	props := map[string]any{}
	for name, s := range all {
		if contains(config.CandidateSections, name) {
			props[name] = s
			continue
		}
		msg := fmt.Sprintf("shadowConfig takes only %s, the sections faxgate reads from a candidate: remove %s from shadowConfig", sections, name)
		props[name] = map[string]any{"const": msg, "description": "not a section of the candidate"}
	}
	return map[string]any{
		"type":                 []string{"object", "null"},
		"additionalProperties": false,
		"properties":           props,
		"description":          "changes to config for a shadow candidate (" + sections + "), generated from faxgate's configuration types by make mixin",
	}
}

var durationType = reflect.TypeOf(time.Duration(0))

func schemaOf(t reflect.Type, path string) map[string]any {
	if owner, ok := chartOwned[path]; ok {
		msg := fmt.Sprintf("set by the chart from %s: remove %s from config", owner, path)
		return map[string]any{"const": msg, "description": "owned by the chart (" + owner + ")"}
	}
	var s map[string]any
	switch {
	case t == durationType:
		s = map[string]any{"type": []string{"string", "integer", "null"}, "description": "a Go duration such as 90s or 1h30m"}
	case t.Kind() == reflect.Pointer:
		return schemaOf(t.Elem(), path)
	case t.Kind() == reflect.Struct:
		props := map[string]any{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			props[name] = schemaOf(f.Type, join(path, name))
		}
		s = map[string]any{"type": []string{"object", "null"}, "additionalProperties": false, "properties": props}
	case t.Kind() == reflect.Slice:
		s = map[string]any{"type": []string{"array", "null"}, "items": schemaOf(t.Elem(), path+"[]")}
	case t.Kind() == reflect.Map:
		s = map[string]any{"type": []string{"object", "null"}, "additionalProperties": schemaOf(t.Elem(), path+".*")}
	case t.Kind() == reflect.String:
		s = map[string]any{"type": []string{"string", "number", "boolean", "null"}}
	case t.Kind() == reflect.Bool:
		s = map[string]any{"type": []string{"boolean", "string", "null"}}
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		s = map[string]any{"type": []string{"integer", "string", "null"}}
	case t.Kind() == reflect.Float64:
		s = map[string]any{"type": []string{"number", "string", "null"}}
	default:
		panic(fmt.Sprintf("mixin: no schema for %s at %s", t, path))
	}
	chartOverlay(path, s)
	return s
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// WithConfigSchema returns the chart's values schema doc with its
// properties.config replaced by ConfigSchema and properties.shadowConfig by
// ShadowConfigSchema; the rest of the file is the
// chart's own and stays as written (re-indented, keys in order).
func WithConfigSchema(doc []byte) ([]byte, error) {
	var v map[string]any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, fmt.Errorf("values schema: %v", err)
	}
	props, ok := v["properties"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("values schema: no properties")
	}
	props["config"] = ConfigSchema()
	props["shadowConfig"] = ShadowConfigSchema()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
