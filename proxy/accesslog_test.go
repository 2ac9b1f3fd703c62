package proxy_test

import (
	"bytes"
	"io"
	"math"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/proxy"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                         { return c.t }
func (c fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// jsonLogger is a zap logger with the encoder configuration AccessLog
// copies (gateway.NewLogs's JSON format, whose tests hold it to the line
// of TestAccessLineFormat): production keys, "ts" in RFC 3339 with
// nanoseconds, the level in lower case.
func jsonLogger(w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), zap.InfoLevel))
}

// accessLines writes f's access line both ways: proxy.AccessLog, and zap
// with the encoder configuration it copies.
func accessLines(t testing.TB, now time.Time, f proxy.AccessFields) (fast, viaZap string) {
	t.Helper()
	var a, z bytes.Buffer
	proxy.WriteAccessLine(&proxy.AccessLog{Out: &a, Level: zap.InfoLevel}, now, f)
	proxy.WriteAccessLineZap(jsonLogger(&z).Named("access").WithOptions(zap.WithClock(fixedClock{now})), f)
	return a.String(), z.String()
}

// The access line's bytes (docs/logs.md); internal/app/gateway's
// TestJSONAccessLineIsTheFastWritersLine holds the gateway's JSON encoder
// to the same line.
func TestAccessLineFormat(t *testing.T) {
	const want = `{"level":"info","ts":"2026-11-26T01:02:03.4506Z","logger":"access","msg":"request",` +
		`"request_id":"0a1b2c3d","caller":"billing","route":"contacts.list","method":"POST","status":200,` +
		`"duration_ms":2001.234,"wait_ms":2000,"bytes_in":55,"bytes_out":1100,"upstream_status":200,"attempts":1,"error":""}` + "\n"
	now := time.Date(2026, 11, 26, 1, 2, 3, 450600000, time.UTC)
	fast, z := accessLines(t, now, proxy.AccessFields{ID: "0a1b2c3d", Caller: "billing", Route: "contacts.list", Method: "POST",
		Status: 200, UpstreamStatus: 200, Attempts: 1, Elapsed: 2001234 * time.Microsecond, Waited: 2 * time.Second, BytesIn: 55, BytesOut: 1100})
	if fast != want || z != want {
		t.Errorf("access line\n got: %s     zap: %s    want: %s", fast, z, want)
	}
}

func TestAccessLineMatchesZap(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 2, 3, 450600000, time.UTC)
	cases := []proxy.AccessFields{
		{ID: "0a1b2c3d4e5f6a7b", Caller: "billing", Route: "contacts.list", Method: "POST",
			Status: 200, UpstreamStatus: 200, Elapsed: 1234567 * time.Nanosecond, Waited: 1234 * time.Microsecond, BytesIn: 55, BytesOut: 1100},
		{ID: "x", Caller: "unidentified", Route: "none", Method: "other", Code: "forbidden", Status: 403},
		{ID: "q\"uote\\back\nline\rret\ttab\x00\x1f\x7f<>&", Caller: "héllo\xff\xfe世界", Route: "\u2028",
			Method: "GET", Code: "client_closed", Status: 499, Elapsed: -time.Millisecond, BytesIn: -1, BytesOut: math.MaxInt64},
		{Elapsed: 0},
	}
	for _, f := range cases {
		fast, z := accessLines(t, now, f)
		if fast != z {
			t.Errorf("access line differs from zap's\n got: %s\nwant: %s", fast, z)
		}
	}
	// The time zone is written as zap writes it.
	fast, z := accessLines(t, now.In(time.FixedZone("X", -(3*3600+30*60))), cases[0])
	if fast != z {
		t.Errorf("with a zone offset\n got: %s\nwant: %s", fast, z)
	}
}

// Every duration_ms the fast path writes is zap's, at the edges of its
// digits and of its range.
func TestAccessLineDurations(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 2, 3, 0, time.UTC)
	for _, us := range []int64{0, 1, 9, 10, 99, 100, 101, 110, 999, 1000, 1001, 1010, 1100, 12345, 999999,
		1e6, 123456789, 1e12 - 1, 1e12, 1e12 + 1, 1<<53 + 1, math.MaxInt64 / 1000, -1, -1500} {
		fast, z := accessLines(t, now, proxy.AccessFields{Elapsed: time.Duration(us) * time.Microsecond})
		if fast != z {
			t.Errorf("%d µs:\n got: %s\nwant: %s", us, fast, z)
		}
	}
}

// The access line follows its level, also when a reload changes it.
func TestAccessLineFollowsTheLevel(t *testing.T) {
	var out bytes.Buffer
	lvl := zap.NewAtomicLevelAt(zap.WarnLevel)
	a := &proxy.AccessLog{Out: &out, Level: lvl}
	proxy.WriteAccessLine(a, time.Now(), proxy.AccessFields{ID: "a"})
	if out.Len() != 0 {
		t.Fatalf("an access line at level warn: %s", out.String())
	}
	lvl.SetLevel(zap.InfoLevel) // what a reload does
	proxy.WriteAccessLine(a, time.Now(), proxy.AccessFields{ID: "a"})
	if out.Len() == 0 {
		t.Fatal("no access line once the level is info")
	}
}

func FuzzAccessLineMatchesZap(f *testing.F) {
	f.Add("0a1b2c3d", "svc", "contacts.list", "POST", "", 200, 200, int64(1500000), int64(55), int64(1100), int64(0), []byte(nil))
	f.Add("\"\\\n", "\xff\x00", "é", "x", "forbidden", 403, 0, int64(-1), int64(-5), int64(0), int64(-7200), []byte(nil))
	// With a trace: trace_id only (tracing off, a caller's traceparent), and with span_id.
	f.Add("r", "svc", "contacts.list", "POST", "", 200, 200, int64(1), int64(1), int64(1), int64(0), []byte("\x0a\xf7\x65\x19\x16\xcd\x43\xdd\x84\x48\xeb\x21\x1c\x80\x31\x9c"))
	f.Add("r", "svc", "contacts.list", "POST", "", 200, 200, int64(1), int64(1), int64(1), int64(0), []byte("\x0a\xf7\x65\x19\x16\xcd\x43\xdd\x84\x48\xeb\x21\x1c\x80\x31\x9c\xb7\xad\x6b\x71\x69\x20\x33\x31"))
	f.Fuzz(func(t *testing.T, id, caller, route, method, code string, status, up int, elapsed, in, out, tz int64, ids []byte) {
		now := time.Unix(1764118923, elapsed&0x3fffffff).In(time.FixedZone("Z", int(tz%86400)))
		fl := proxy.AccessFields{ID: id, Caller: caller, Route: route, Method: method, Code: code,
			Status: status, UpstreamStatus: up, Elapsed: time.Duration(elapsed), Waited: time.Duration(elapsed / 3),
			BytesIn: in, BytesOut: out}
		if len(ids) >= 16 {
			copy(fl.TraceID[:], ids)
			copy(fl.SpanID[:], ids[16:])
		}
		fast, z := accessLines(t, now, fl)
		if fast != z {
			t.Fatalf("access line differs from zap's\n got: %q\nwant: %q", fast, z)
		}
	})
}
