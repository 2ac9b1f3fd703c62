package otlpexport

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// message is a protobuf message written field by field into one buffer.
// A nested message is opened, written in place and closed: close puts its
// length in front of it, moving it by the length's size (one byte for most
// messages of a span). One buffer and no second pass over the spans to
// size them first.
//
// The scalar writers leave a field out when it holds its zero value, as
// proto3 does; a oneof's member is written whatever its value, since the
// member's presence is the value's type (see value.go).
type message struct{ b []byte }

// open starts the nested message of field num; close(open(...)) ends it.
func (m *message) open(num protowire.Number) int {
	m.b = protowire.AppendTag(m.b, num, protowire.BytesType)
	return len(m.b)
}

// close ends the nested message that started at start, prefixing its length.
func (m *message) close(start int) {
	n := len(m.b) - start
	size := protowire.SizeVarint(uint64(n))
	m.b = append(m.b, make([]byte, size)...)
	copy(m.b[start+size:], m.b[start:start+n])
	protowire.AppendVarint(m.b[start:start], uint64(n))
}

func (m *message) bytes(num protowire.Number, v []byte) {
	if len(v) > 0 {
		m.b = protowire.AppendTag(m.b, num, protowire.BytesType)
		m.b = protowire.AppendBytes(m.b, v)
	}
}

func (m *message) string(num protowire.Number, v string) {
	if v != "" {
		m.b = protowire.AppendTag(m.b, num, protowire.BytesType)
		m.b = protowire.AppendString(m.b, v)
	}
}

func (m *message) varint(num protowire.Number, v uint64) {
	if v != 0 {
		m.b = protowire.AppendTag(m.b, num, protowire.VarintType)
		m.b = protowire.AppendVarint(m.b, v)
	}
}

func (m *message) fixed64(num protowire.Number, v uint64) {
	if v != 0 {
		m.b = protowire.AppendTag(m.b, num, protowire.Fixed64Type)
		m.b = protowire.AppendFixed64(m.b, v)
	}
}

func (m *message) fixed32(num protowire.Number, v uint32) {
	if v != 0 {
		m.b = protowire.AppendTag(m.b, num, protowire.Fixed32Type)
		m.b = protowire.AppendFixed32(m.b, v)
	}
}

// count is a dropped count as OTLP's uint32: the SDK's int, never negative,
// saturated rather than wrapped.
func count(n int) uint64 {
	return uint64(min(max(n, 0), math.MaxUint32))
}
