package otlpexport

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of opentelemetry-proto's common/v1 messages.
const (
	keyValueKey   protowire.Number = 1 // KeyValue.key
	keyValueValue protowire.Number = 2 // KeyValue.value (AnyValue)

	anyString protowire.Number = 1 // AnyValue.string_value (oneof value)
	anyBool   protowire.Number = 2 // AnyValue.bool_value
	anyInt    protowire.Number = 3 // AnyValue.int_value
	anyDouble protowire.Number = 4 // AnyValue.double_value
	anyArray  protowire.Number = 5 // AnyValue.array_value (ArrayValue)
	anyKVList protowire.Number = 6 // AnyValue.kvlist_value (KeyValueList)
	anyBytes  protowire.Number = 7 // AnyValue.bytes_value

	listValues protowire.Number = 1 // ArrayValue.values, KeyValueList.values
)

// attributes writes kvs as repeated KeyValue field num.
func (m *message) attributes(num protowire.Number, kvs []attribute.KeyValue) {
	for _, kv := range kvs {
		m.keyValue(num, kv)
	}
}

// attributeSet is attributes for an attribute.Set (a resource's, a scope's).
func (m *message) attributeSet(num protowire.Number, s *attribute.Set) {
	for it := s.Iter(); it.Next(); {
		m.keyValue(num, it.Attribute())
	}
}

func (m *message) keyValue(num protowire.Number, kv attribute.KeyValue) {
	at := m.open(num)
	m.string(keyValueKey, string(kv.Key))
	m.anyValue(keyValueValue, kv.Value)
	m.close(at)
}

// anyValue writes v as the AnyValue of field num. The member of the oneof
// is written even when it holds its zero value (false, 0, ""): its presence
// says the value's type. An empty value is an AnyValue with no member, as
// the OTLP data model has it.
func (m *message) anyValue(num protowire.Number, v attribute.Value) {
	at := m.open(num)
	switch v.Type() {
	case attribute.BOOL:
		m.oneofBool(v.AsBool())
	case attribute.INT64:
		m.oneofInt(v.AsInt64())
	case attribute.FLOAT64:
		m.oneofDouble(v.AsFloat64())
	case attribute.STRING:
		m.oneofString(v.AsString())
	case attribute.BYTESLICE:
		m.b = protowire.AppendTag(m.b, anyBytes, protowire.BytesType)
		m.b = protowire.AppendBytes(m.b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		array(m, v.AsBoolSlice(), (*message).oneofBool)
	case attribute.INT64SLICE:
		array(m, v.AsInt64Slice(), (*message).oneofInt)
	case attribute.FLOAT64SLICE:
		array(m, v.AsFloat64Slice(), (*message).oneofDouble)
	case attribute.STRINGSLICE:
		array(m, v.AsStringSlice(), (*message).oneofString)
	case attribute.SLICE:
		arr := m.open(anyArray)
		for _, e := range v.AsSlice() {
			m.anyValue(listValues, e)
		}
		m.close(arr)
	case attribute.MAP:
		list := m.open(anyKVList)
		for _, kv := range v.AsMap() {
			m.keyValue(listValues, kv)
		}
		m.close(list)
	}
	m.close(at)
}

// array writes vs as the ArrayValue member of the AnyValue being written,
// each element an AnyValue of its own whose member one writes.
func array[T any](m *message, vs []T, one func(*message, T)) {
	arr := m.open(anyArray)
	for _, v := range vs {
		at := m.open(listValues)
		one(m, v)
		m.close(at)
	}
	m.close(arr)
}

func (m *message) oneofBool(v bool) {
	m.b = protowire.AppendTag(m.b, anyBool, protowire.VarintType)
	m.b = protowire.AppendVarint(m.b, protowire.EncodeBool(v))
}

func (m *message) oneofInt(v int64) {
	m.b = protowire.AppendTag(m.b, anyInt, protowire.VarintType)
	m.b = protowire.AppendVarint(m.b, uint64(v))
}

func (m *message) oneofDouble(v float64) {
	m.b = protowire.AppendTag(m.b, anyDouble, protowire.Fixed64Type)
	m.b = protowire.AppendFixed64(m.b, math.Float64bits(v))
}

func (m *message) oneofString(v string) {
	m.b = protowire.AppendTag(m.b, anyString, protowire.BytesType)
	m.b = protowire.AppendString(m.b, v)
}
