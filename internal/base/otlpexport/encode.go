package otlpexport

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of opentelemetry-proto's collector/trace/v1, trace/v1,
// resource/v1 and common/v1 (InstrumentationScope) messages.
const (
	requestResourceSpans protowire.Number = 1 // ExportTraceServiceRequest.resource_spans

	resourceSpansResource   protowire.Number = 1 // ResourceSpans.resource (Resource)
	resourceSpansScopeSpans protowire.Number = 2
	resourceSpansSchemaURL  protowire.Number = 3
	resourceAttributes      protowire.Number = 1 // Resource.attributes

	scopeSpansScope     protowire.Number = 1 // ScopeSpans.scope (InstrumentationScope)
	scopeSpansSpans     protowire.Number = 2
	scopeSpansSchemaURL protowire.Number = 3
	scopeName           protowire.Number = 1 // InstrumentationScope.name
	scopeVersion        protowire.Number = 2
	scopeAttributes     protowire.Number = 3

	spanTraceID           protowire.Number = 1
	spanSpanID            protowire.Number = 2
	spanTraceState        protowire.Number = 3
	spanParentSpanID      protowire.Number = 4
	spanName              protowire.Number = 5
	spanKind              protowire.Number = 6
	spanStart             protowire.Number = 7  // fixed64 unix nanoseconds
	spanEnd               protowire.Number = 8  // fixed64 unix nanoseconds
	spanAttributes        protowire.Number = 9  // KeyValue
	spanDroppedAttributes protowire.Number = 10 // uint32
	spanEvents            protowire.Number = 11
	spanDroppedEvents     protowire.Number = 12
	spanLinks             protowire.Number = 13
	spanDroppedLinks      protowire.Number = 14
	spanStatus            protowire.Number = 15
	spanFlags             protowire.Number = 16 // fixed32 SpanFlags

	eventTime              protowire.Number = 1 // Span.Event
	eventName              protowire.Number = 2
	eventAttributes        protowire.Number = 3
	eventDroppedAttributes protowire.Number = 4

	linkTraceID           protowire.Number = 1 // Span.Link
	linkSpanID            protowire.Number = 2
	linkTraceState        protowire.Number = 3
	linkAttributes        protowire.Number = 4
	linkDroppedAttributes protowire.Number = 5
	linkFlags             protowire.Number = 6 // fixed32 SpanFlags

	statusMessage protowire.Number = 2 // Status
	statusCode    protowire.Number = 3
)

// SpanFlags' bits above the W3C trace flags: whether the span's parent (or
// a link's context) is known to be remote or local, and if remote.
const (
	flagsHasIsRemote uint32 = 0x100
	flagsIsRemote    uint32 = 0x200
)

// Status codes: opentelemetry-proto's Status.StatusCode.
const (
	codeUnset = 0
	codeOK    = 1
	codeError = 2
)

// scopeKey is what a ScopeSpans groups by: the resource and the scope.
type scopeKey struct {
	res   attribute.Distinct
	scope instrumentation.Scope
}

// resourceGroup is one ResourceSpans: its resource, and its scopes in the
// order their first span came.
type resourceGroup struct {
	res    *resource.Resource
	scopes []*scopeGroup
}

type scopeGroup struct {
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// appendRequest appends spans to b as an ExportTraceServiceRequest: one
// ResourceSpans per resource, one ScopeSpans per instrumentation scope in
// it, in the order the spans came.
func appendRequest(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	var groups []*resourceGroup
	byRes := map[attribute.Distinct]*resourceGroup{}
	byScope := map[scopeKey]*scopeGroup{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		res := s.Resource()
		k := scopeKey{res.Equivalent(), s.InstrumentationScope()}
		sg := byScope[k]
		if sg == nil {
			rg := byRes[k.res]
			if rg == nil {
				rg = &resourceGroup{res: res}
				byRes[k.res] = rg
				groups = append(groups, rg)
			}
			sg = &scopeGroup{scope: k.scope}
			byScope[k] = sg
			rg.scopes = append(rg.scopes, sg)
		}
		sg.spans = append(sg.spans, s)
	}
	m := message{b: b}
	for _, rg := range groups {
		at := m.open(requestResourceSpans)
		m.resourceSpans(rg)
		m.close(at)
	}
	return m.b
}

// resourceSpans writes a ResourceSpans. The SDK's resource counts no
// dropped attributes, so Resource.dropped_attributes_count stays 0.
func (m *message) resourceSpans(rg *resourceGroup) {
	at := m.open(resourceSpansResource)
	m.attributeSet(resourceAttributes, rg.res.Set())
	m.close(at)
	for _, sg := range rg.scopes {
		ss := m.open(resourceSpansScopeSpans)
		sc := m.open(scopeSpansScope)
		m.string(scopeName, sg.scope.Name)
		m.string(scopeVersion, sg.scope.Version)
		m.attributeSet(scopeAttributes, &sg.scope.Attributes)
		m.close(sc)
		for _, s := range sg.spans {
			sp := m.open(scopeSpansSpans)
			m.span(s)
			m.close(sp)
		}
		m.string(scopeSpansSchemaURL, sg.scope.SchemaURL)
		m.close(ss)
	}
	m.string(resourceSpansSchemaURL, rg.res.SchemaURL())
}

func (m *message) span(s sdktrace.ReadOnlySpan) {
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	m.bytes(spanTraceID, tid[:])
	m.bytes(spanSpanID, sid[:])
	m.string(spanTraceState, sc.TraceState().String())
	if psid := parent.SpanID(); psid.IsValid() {
		m.bytes(spanParentSpanID, psid[:])
	}
	m.string(spanName, s.Name())
	m.varint(spanKind, kind(s.SpanKind()))
	m.fixed64(spanStart, unixNano(s.StartTime()))
	m.fixed64(spanEnd, unixNano(s.EndTime()))
	m.attributes(spanAttributes, s.Attributes())
	m.varint(spanDroppedAttributes, count(s.DroppedAttributes()))
	for _, e := range s.Events() {
		at := m.open(spanEvents)
		m.fixed64(eventTime, unixNano(e.Time))
		m.string(eventName, e.Name)
		m.attributes(eventAttributes, e.Attributes)
		m.varint(eventDroppedAttributes, count(e.DroppedAttributeCount))
		m.close(at)
	}
	m.varint(spanDroppedEvents, count(s.DroppedEvents()))
	for _, l := range s.Links() {
		at := m.open(spanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		m.bytes(linkTraceID, ltid[:])
		m.bytes(linkSpanID, lsid[:])
		m.string(linkTraceState, l.SpanContext.TraceState().String())
		m.attributes(linkAttributes, l.Attributes)
		m.varint(linkDroppedAttributes, count(l.DroppedAttributeCount))
		m.fixed32(linkFlags, flags(l.SpanContext.TraceFlags(), l.SpanContext))
		m.close(at)
	}
	m.varint(spanDroppedLinks, count(s.DroppedLinks()))
	at := m.open(spanStatus)
	st := s.Status()
	switch st.Code {
	case codes.Ok:
		m.varint(statusCode, codeOK)
	case codes.Error:
		// Only an error carries a description (the SDK drops any other).
		m.string(statusMessage, st.Description)
		m.varint(statusCode, codeError)
	default:
		m.varint(statusCode, codeUnset)
	}
	m.close(at)
	m.fixed32(spanFlags, flags(sc.TraceFlags(), parent))
}

// flags is a SpanFlags value: the W3C trace flags of the span (or link) in
// the low byte, and whether ctx (the span's parent, or the link's context)
// is remote, which the SDK always knows.
func flags(tf trace.TraceFlags, ctx trace.SpanContext) uint32 {
	f := uint32(tf) | flagsHasIsRemote
	if ctx.IsRemote() {
		f |= flagsIsRemote
	}
	return f
}

// kind maps the SDK's span kind to opentelemetry-proto's Span.SpanKind.
func kind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	default:
		return 0 // SPAN_KIND_UNSPECIFIED
	}
}

// unixNano is t in OTLP's fixed64 unix nanoseconds; a time before 1970
// (the zero time among them) is 0, "unknown".
func unixNano(t time.Time) uint64 {
	if n := t.UnixNano(); n > 0 && !t.Before(time.Unix(0, 0)) {
		return uint64(n)
	}
	return 0
}
