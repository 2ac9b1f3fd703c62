// Package tracing holds what the packages that make spans share
// (docs/tracing.md): faxgate's attribute keys, a child span that costs
// nothing when tracing is off or the request is not sampled, and the
// traceparent parser that puts a caller's trace ID on log lines when
// tracing is off. The SDK (provider, sampler, exporter) is set up by the
// assembler, internal/app/gateway; every other package sees only a
// trace.Tracer, nil when tracing is off.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// faxgate's own attributes. Their values are fixed words, config names or
// numbers: never a token, key, body, query string or caller-chosen text.
const (
	// Caller is the caller's configured name, or "unidentified".
	Caller = attribute.Key("faxgate.caller")
	// Error is the error code of an answer faxgate made itself.
	Error = attribute.Key("faxgate.error")
	// Decision is the audit decision on a sensitive route (denied,
	// forwarded, unknown).
	Decision = attribute.Key("faxgate.decision")
	// Result is the outcome of a token renewal (ok, error, invalid_key) or
	// of a wait.
	Result = attribute.Key("faxgate.result")
	// Backend says who decided a shared limit: redis, or local when Redis
	// failed and this replica decided alone.
	Backend = attribute.Key("faxgate.backend")
	// Limit is the name of an upstream_budget limit.
	Limit = attribute.Key("faxgate.limit")
)

// Redis marks a span of a Redis call (semantic conventions: db.system.name).
var Redis = attribute.String("db.system.name", "redis")

// none is the span returned when no span is made: every method is a no-op.
var none = trace.SpanFromContext(context.Background())

// Child starts a span named name as a child of ctx's span, when tracer is
// set and ctx's span is being recorded (a sampled request); otherwise it
// returns ctx and a span that does nothing, without allocating. Callers
// guard attribute building with span.IsRecording().
func Child(ctx context.Context, tracer trace.Tracer, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, none
	}
	return tracer.Start(ctx, name, opts...)
}

// ParseTraceparent reads a W3C traceparent header value
// ("00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>") as the
// specification's version 00 parser does, and returns its trace ID; ok is
// false for anything else, an all-zero ID included. It does not allocate.
func ParseTraceparent(v string) (id trace.TraceID, ok bool) {
	// Version 00 is exactly 55 bytes; a later version may be longer, with
	// "-" after the flags.
	if len(v) < 55 || (len(v) > 55 && (v[:2] == "00" || v[55] != '-')) {
		return id, false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' || v[:2] == "ff" {
		return id, false
	}
	for _, i := range [...]int{0, 1, 53, 54} {
		if hexVal(v[i]) < 0 {
			return id, false
		}
	}
	var span trace.SpanID
	if !decodeHex(id[:], v[3:35]) || !decodeHex(span[:], v[36:52]) || !id.IsValid() || !span.IsValid() {
		return trace.TraceID{}, false
	}
	return id, true
}

// decodeHex decodes lower-case hex s into dst (len(s) == 2*len(dst)).
func decodeHex(dst []byte, s string) bool {
	for i := range dst {
		hi, lo := hexVal(s[2*i]), hexVal(s[2*i+1])
		if hi < 0 || lo < 0 {
			return false
		}
		dst[i] = byte(hi<<4 | lo)
	}
	return true
}

// hexVal is the value of a lower-case hex digit, or -1 (the specification
// allows lower case only).
func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// AppendHex appends b in lower-case hex, as trace and span IDs are written.
func AppendHex(dst, b []byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range b {
		dst = append(dst, digits[c>>4], digits[c&0xf])
	}
	return dst
}
