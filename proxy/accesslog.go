package proxy

import (
	"io"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/base/tracing"
)

// AccessLog writes the access lines (docs/logs.md) itself, as the
// exact bytes zap's JSON encoder writes for them with the gateway's encoder
// configuration (gateway.NewLogs: production keys, "ts" as RFC 3339 with
// nanoseconds, lower-case level, the logger named "access"). Going through
// zap costs a checked entry, an encoder clone and a generic field walk on
// every request, about 1.5 µs; this is one append pass into a pooled buffer.
// FuzzAccessLineMatchesZap holds the two byte for byte.
type AccessLog struct {
	// Out is the sink the process's other lines go to (the buffered one,
	// when the access log is buffered); it must accept concurrent writes of
	// whole lines, as a zapcore.WriteSyncer does.
	Out io.Writer
	// Level is log.level: the line is written when it enables info.
	Level zapcore.LevelEnabler
}

var accessBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// write writes ex's access line, stamped now, if info is enabled.
func (a *AccessLog) write(now time.Time, ex *exchange) {
	if !a.Level.Enabled(zapcore.InfoLevel) {
		return
	}
	bp := accessBufs.Get().(*[]byte)
	b := appendAccessLine((*bp)[:0], now, ex)
	_, _ = a.Out.Write(b)
	if cap(b) <= 64<<10 { // a huge line (a long caller name) is not kept
		*bp = b
		accessBufs.Put(bp)
	}
}

// accessLine is the access line's fields, for a handler with no AccessLog
// (the console format), added by one inlined marshaler: ten zap.Fields
// would be built, type-switched and, as a variadic slice, allocated on
// every request.
type accessLine struct{ ex *exchange }

func (l accessLine) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	ex := l.ex
	enc.AddString("request_id", ex.id)
	enc.AddString("caller", ex.out.Caller)
	enc.AddString("route", ex.out.Route)
	enc.AddString("method", ex.method)
	enc.AddInt("status", ex.status)
	enc.AddFloat64("duration_ms", float64(ex.elapsed.Microseconds())/1000)
	enc.AddFloat64("wait_ms", float64(ex.out.Admission.Waited.Microseconds())/1000)
	enc.AddInt64("bytes_in", ex.leg.body.n)
	enc.AddInt64("bytes_out", ex.w.bytes)
	enc.AddInt("upstream_status", ex.leg.upstreamStatus)
	enc.AddInt("attempts", ex.leg.attempts)
	enc.AddString("error", ex.code)
	if ex.shadow != "" {
		enc.AddString("shadow", ex.shadow)
	}
	if ex.hasID {
		trace, span := ex.idStrings()
		enc.AddString("trace_id", trace)
		if span != "" {
			enc.AddString("span_id", span)
		}
	}
	return nil
}

// appendAccessLine appends ex's access line as zap's JSON encoder would
// encode Info("request", zap.Inline(accessLine{ex})) from a logger named
// "access" at time now.
func appendAccessLine(b []byte, now time.Time, ex *exchange) []byte {
	b = append(b, `{"level":"info","ts":"`...)
	b = now.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","logger":"access","msg":"request","request_id":"`...)
	b = appendJSONString(b, ex.id)
	b = append(b, `","caller":"`...)
	b = appendJSONString(b, ex.out.Caller)
	b = append(b, `","route":"`...)
	b = appendJSONString(b, ex.out.Route)
	b = append(b, `","method":"`...)
	b = appendJSONString(b, ex.method)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(ex.status), 10)
	b = append(b, `,"duration_ms":`...)
	b = appendMillis(b, ex.elapsed.Microseconds())
	b = append(b, `,"wait_ms":`...)
	b = appendMillis(b, ex.out.Admission.Waited.Microseconds())
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, ex.leg.body.n, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, ex.w.bytes, 10)
	b = append(b, `,"upstream_status":`...)
	b = strconv.AppendInt(b, int64(ex.leg.upstreamStatus), 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(ex.leg.attempts), 10)
	b = append(b, `,"error":"`...)
	b = appendJSONString(b, ex.code)
	if ex.shadow != "" {
		b = append(b, `","shadow":"`...)
		b = appendJSONString(b, ex.shadow)
	}
	if ex.hasID {
		// Hex of fixed-size IDs: nothing to escape (docs/logs.md: with
		// tracing on, or a valid traceparent, the line carries the trace).
		b = append(b, `","trace_id":"`...)
		b = tracing.AppendHex(b, ex.traceID[:])
		if ex.spanID.IsValid() {
			b = append(b, `","span_id":"`...)
			b = tracing.AppendHex(b, ex.spanID[:])
		}
	}
	return append(b, "\"}\n"...)
}

// appendMillis appends us/1000 as zap encodes float64(us)/1000, without
// the general float formatting: below 10^12 µs (31 years) a quotient with
// at most three decimals is exactly the shortest decimal of that float.
func appendMillis(b []byte, us int64) []byte {
	if us < 0 || us >= 1e12 {
		return appendJSONFloat(b, float64(us)/1000)
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return b
	}
	d := [4]byte{'.', byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 4
	for d[n-1] == '0' {
		n--
	}
	return append(b, d[:n]...)
}

// appendJSONFloat is zap's float encoding: NaN and infinities as strings,
// everything else in the shortest 'f' form.
func appendJSONFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"+Inf"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Inf"`...)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s escaped as zap escapes a JSON string (without
// the quotes): backslash and quote escaped, \n \r \t by name, other bytes
// below 0x20 as \u00XX, each byte of invalid UTF-8 as \ufffd, and nothing
// else (zap, unlike encoding/json, leaves <, > and & alone).
func appendJSONString(b []byte, s string) []byte {
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(b, s[last:i]...)
			b = append(b, `\ufffd`...)
			i++
			last = i
			continue
		}
		if c >= 0x20 && c != '\\' && c != '"' {
			i++
			continue
		}
		b = append(b, s[last:i]...)
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		i++
		last = i
	}
	return append(b, s[last:]...)
}
