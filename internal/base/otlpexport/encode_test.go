package otlpexport

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/faxgate/faxgate/internal/base/clock"
)

const (
	schema1 = "https://opentelemetry.io/schemas/1.26.0"
	schema2 = "https://opentelemetry.io/schemas/1.24.0"
)

// The wanted values are written out as OTLP's generated types, so that a
// field the exporter numbers, types or fills wrongly shows as a difference.
func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}
func str(v string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}
}
func boolean(v bool) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}
}
func integer(v int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}
}
func double(v float64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}
}
func arr(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}

// everyValue is one attribute of each type the SDK has, zero values among
// them (a oneof member is sent even when zero: it is the value's type).
var everyValue = []attribute.KeyValue{
	attribute.Bool("bool", true), attribute.Bool("bool.false", false),
	attribute.Int64("int", -42), attribute.Int("int.zero", 0), attribute.Int64("int.max", math.MaxInt64),
	attribute.Float64("float", 2.5), attribute.Float64("float.zero", 0),
	attribute.String("string", "héllo"), attribute.String("string.empty", ""),
	attribute.BoolSlice("bools", []bool{true, false}),
	attribute.Int64Slice("ints", []int64{1, -2, 0}),
	attribute.Float64Slice("floats", []float64{0.5, 0}),
	attribute.StringSlice("strings", []string{"a", ""}),
	attribute.StringSlice("strings.none", []string{}),
	attribute.ByteSlice("bytes", []byte{0, 1, 0xff}),
	{Key: "slice", Value: attribute.SliceValue(attribute.IntValue(7), attribute.StringValue("x"))},
	{Key: "map", Value: attribute.MapValue(attribute.Bool("inner", false))},
	{Key: "empty"},
}

var everyValueWant = []*commonpb.KeyValue{
	kv("bool", boolean(true)), kv("bool.false", boolean(false)),
	kv("int", integer(-42)), kv("int.zero", integer(0)), kv("int.max", integer(math.MaxInt64)),
	kv("float", double(2.5)), kv("float.zero", double(0)),
	kv("string", str("héllo")), kv("string.empty", str("")),
	kv("bools", arr(boolean(true), boolean(false))),
	kv("ints", arr(integer(1), integer(-2), integer(0))),
	kv("floats", arr(double(0.5), double(0))),
	kv("strings", arr(str("a"), str(""))),
	kv("strings.none", arr()),
	kv("bytes", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 0xff}}}),
	kv("slice", arr(integer(7), str("x"))),
	kv("map", &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{
		Values: []*commonpb.KeyValue{kv("inner", boolean(false))}}}}),
	kv("empty", &commonpb.AnyValue{}),
}

func ids(sc trace.SpanContext) ([]byte, []byte) {
	tid, sid := sc.TraceID(), sc.SpanID()
	return tid[:], sid[:]
}

func mustTraceState(t *testing.T, s string) trace.TraceState {
	t.Helper()
	ts, err := trace.ParseTraceState(s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestExportCarriesEveryField: spans of real tracer providers (two
// resources, two scopes, a remote parent, a link, an event, every attribute
// type, each status) decode, with OTLP's own types, to what they hold.
func TestExportCarriesEveryField(t *testing.T) {
	// The SDK merges these into a provider's resource.
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	at := func(ms int) time.Time { return time.Unix(1_790_000_000, 7).Add(time.Duration(ms) * time.Millisecond) }
	nanos := func(ms int) uint64 { return uint64(at(ms).UnixNano()) }

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithResource(resource.NewWithAttributes(schema1, attribute.String("service.name", "faxgate"), attribute.Int("replica", 2))))
	other := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "other"))))
	one := tp.Tracer("scope.one", trace.WithInstrumentationVersion("1.2.3"), trace.WithSchemaURL(schema2),
		trace.WithInstrumentationAttributes(attribute.String("lib", "x")))
	two := tp.Tracer("scope.two")

	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled,
		TraceState: mustTraceState(t, "vendor=1,other=x"), Remote: true})
	linked := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{8, 7, 6, 5, 4, 3, 2, 1}, TraceFlags: trace.FlagsSampled,
		TraceState: mustTraceState(t, "linked=yes"), Remote: true})
	unsampledLocal := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0: 9, 15: 9}, SpanID: trace.SpanID{0: 9, 7: 9}})

	ctx, server := one.Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "server",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at(0)), trace.WithAttributes(everyValue...),
		trace.WithLinks(trace.Link{SpanContext: linked, Attributes: []attribute.KeyValue{attribute.String("why", "batch")}},
			trace.Link{SpanContext: unsampledLocal}))
	server.AddEvent("retry", trace.WithTimestamp(at(5)), trace.WithAttributes(attribute.Int("attempt", 2)))
	_, client := one.Start(ctx, "client", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(at(1)))
	client.SetStatus(codes.Ok, "the SDK drops an Ok's description")
	client.End(trace.WithTimestamp(at(9)))
	server.SetStatus(codes.Error, "upstream answered 502")
	server.End(trace.WithTimestamp(at(10)))
	_, internal := two.Start(context.Background(), "internal", trace.WithTimestamp(at(20)))
	internal.End(trace.WithTimestamp(at(21)))
	_, producer := other.Tracer("scope.three").Start(context.Background(), "producer",
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(at(30)))
	producer.End(trace.WithTimestamp(at(31)))
	_, consumer := one.Start(context.Background(), "consumer", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(at(40)))
	consumer.End(trace.WithTimestamp(at(41)))

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	col := startCollector(t, nil)
	e := newExporter(t, testOptions(col.URL, clock.Real{}))
	// Interleaved, so that grouping by resource and scope is needed.
	order := []string{"server", "internal", "producer", "client", "consumer"}
	var batch []sdktrace.ReadOnlySpan
	for _, n := range order {
		batch = append(batch, spans[n])
	}
	if err := e.ExportSpans(context.Background(), batch); err != nil {
		t.Fatal(err)
	}

	serverTID, serverSID := ids(spans["server"].SpanContext())
	remoteTID, remoteSID := ids(remote)
	linkedTID, linkedSID := ids(linked)
	localTID, localSID := ids(unsampledLocal)
	span := func(name string, kind tracepb.Span_SpanKind, start, end int, flags uint32) *tracepb.Span {
		tid, sid := ids(spans[name].SpanContext())
		return &tracepb.Span{TraceId: tid, SpanId: sid, Name: name, Kind: kind, StartTimeUnixNano: nanos(start),
			EndTimeUnixNano: nanos(end), Flags: flags, Status: &tracepb.Status{}}
	}
	wantServer := &tracepb.Span{
		TraceId: remoteTID, SpanId: serverSID, TraceState: "vendor=1,other=x", ParentSpanId: remoteSID,
		Flags: 0x01 | 0x100 | 0x200, // sampled; the parent is known to be remote, and is
		Name:  "server", Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: nanos(0), EndTimeUnixNano: nanos(10),
		Attributes: everyValueWant,
		Events: []*tracepb.Span_Event{{TimeUnixNano: nanos(5), Name: "retry",
			Attributes: []*commonpb.KeyValue{kv("attempt", integer(2))}}},
		Links: []*tracepb.Span_Link{
			{TraceId: linkedTID, SpanId: linkedSID, TraceState: "linked=yes",
				Attributes: []*commonpb.KeyValue{kv("why", str("batch"))}, Flags: 0x01 | 0x100 | 0x200},
			{TraceId: localTID, SpanId: localSID, Flags: 0x100}},
		Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "upstream answered 502"},
	}
	wantClient := span("client", tracepb.Span_SPAN_KIND_CLIENT, 1, 9, 0x101)
	wantClient.TraceState, wantClient.ParentSpanId = "vendor=1,other=x", serverSID
	wantClient.Status.Code = tracepb.Status_STATUS_CODE_OK
	if !slices.Equal(wantClient.TraceId, serverTID) {
		t.Fatal("the client span is not in its parent's trace")
	}
	want := &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{
		{
			Resource: resourceOf(kv("replica", integer(2)), kv("service.name", str("faxgate"))),
			ScopeSpans: []*tracepb.ScopeSpans{
				{Scope: &commonpb.InstrumentationScope{Name: "scope.one", Version: "1.2.3",
					Attributes: []*commonpb.KeyValue{kv("lib", str("x"))}},
					Spans:     []*tracepb.Span{wantServer, wantClient, span("consumer", tracepb.Span_SPAN_KIND_CONSUMER, 40, 41, 0x101)},
					SchemaUrl: schema2},
				{Scope: &commonpb.InstrumentationScope{Name: "scope.two"},
					Spans: []*tracepb.Span{span("internal", tracepb.Span_SPAN_KIND_INTERNAL, 20, 21, 0x101)}},
			},
			SchemaUrl: schema1,
		},
		{
			Resource: resourceOf(kv("service.name", str("other"))),
			ScopeSpans: []*tracepb.ScopeSpans{{Scope: &commonpb.InstrumentationScope{Name: "scope.three"},
				Spans: []*tracepb.Span{span("producer", tracepb.Span_SPAN_KIND_PRODUCER, 30, 31, 0x101)}}},
		},
	}}
	got := &tracepb.TracesData{ResourceSpans: col.request(t, 1).ResourceSpans}
	if !proto.Equal(got, want) {
		t.Errorf("the collector decoded\n%s\nwant\n%s", prototext.Format(got), prototext.Format(want))
	}
}

func resourceOf(kvs ...*commonpb.KeyValue) *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: kvs}
}

// TestDroppedCounts: what the SDK's span limits dropped is counted in the
// span, its events and its links.
func TestDroppedCounts(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{
		AttributeValueLengthLimit: -1, AttributeCountLimit: 3, EventCountLimit: 2, LinkCountLimit: 1,
		AttributePerEventCountLimit: 1, AttributePerLinkCountLimit: 2}))
	link := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})
	// The SDK keeps the newest links and events.
	_, s := tp.Tracer("t").Start(context.Background(), "limited", trace.WithLinks(
		trace.Link{SpanContext: link}, trace.Link{SpanContext: link},
		trace.Link{SpanContext: link, Attributes: []attribute.KeyValue{attribute.Int("a", 1), attribute.Int("b", 2), attribute.Int("c", 3)}}))
	for i := range 5 {
		s.SetAttributes(attribute.Int(fmt.Sprint("attr", i), i))
		s.AddEvent("e", trace.WithAttributes(attribute.Int("a", 1), attribute.Int("b", 2)))
	}
	s.End()
	col := startCollector(t, nil)
	if err := newExporter(t, testOptions(col.URL, clock.Real{})).ExportSpans(context.Background(), rec.Ended()); err != nil {
		t.Fatal(err)
	}
	got := col.request(t, 1).ResourceSpans[0].ScopeSpans[0].Spans[0]
	if got.DroppedAttributesCount != 2 || got.DroppedEventsCount != 3 || got.DroppedLinksCount != 2 {
		t.Errorf("dropped attributes %d, events %d, links %d; want 2, 3, 2",
			got.DroppedAttributesCount, got.DroppedEventsCount, got.DroppedLinksCount)
	}
	if len(got.Events) != 2 || got.Events[0].DroppedAttributesCount != 1 || got.Events[1].DroppedAttributesCount != 1 {
		t.Errorf("events %v, want 2 with 1 attribute dropped each", got.Events)
	}
	if len(got.Links) != 1 || got.Links[0].DroppedAttributesCount != 1 || len(got.Links[0].Attributes) != 2 {
		t.Errorf("links %v, want 1 with 2 attributes and 1 dropped", got.Links)
	}
}

// TestLargeBatchDecodes: a full batch, with messages whose lengths take two
// and three bytes, decodes span for span.
func TestLargeBatchDecodes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	long := strings.Repeat("x", 300)
	for i := range 512 {
		_, s := tp.Tracer("t").Start(context.Background(), fmt.Sprint("span-", i), trace.WithAttributes(attribute.String("long", long)))
		s.End()
	}
	col := startCollector(t, nil)
	if err := newExporter(t, testOptions(col.URL, clock.Real{})).ExportSpans(context.Background(), rec.Ended()); err != nil {
		t.Fatal(err)
	}
	got := col.request(t, 1).ResourceSpans[0].ScopeSpans[0].Spans
	if len(got) != 512 {
		t.Fatalf("%d spans decoded, want 512", len(got))
	}
	for i, s := range got {
		if s.Name != fmt.Sprint("span-", i) || s.Attributes[0].Value.GetStringValue() != long {
			t.Fatalf("span %d decoded as %q with %d attributes", i, s.Name, len(s.Attributes))
		}
	}
}
