package proxy_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/app/gateway"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/proxy"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                         { return c.t }
func (c fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// accessLines writes f's access line through the gateway's JSON loggers both
// ways: proxy.AccessLog and zap.
func accessLines(t testing.TB, now time.Time, f proxy.AccessFields) (fast, viaZap string) {
	t.Helper()
	var a, z bytes.Buffer
	la, err := gateway.NewLogs(config.Log{Level: "info", Format: "json"}, &a, 0)
	if err != nil {
		t.Fatal(err)
	}
	lz, err := gateway.NewLogs(config.Log{Level: "info", Format: "json"}, &z, 0)
	if err != nil {
		t.Fatal(err)
	}
	if la.Access == nil {
		t.Fatal("the JSON format has no AccessLog")
	}
	proxy.WriteAccessLine(la.Access, now, f)
	proxy.WriteAccessLineZap(lz.Logger.Named("access").WithOptions(zap.WithClock(fixedClock{now})), f)
	return a.String(), z.String()
}

func TestAccessLineMatchesZap(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 2, 3, 450600000, time.UTC)
	cases := []proxy.AccessFields{
		{ID: "0a1b2c3d4e5f6a7b", Caller: "billing", Route: "contacts.list", Method: "POST",
			Status: 200, UpstreamStatus: 200, Elapsed: 1234567 * time.Nanosecond, BytesIn: 55, BytesOut: 1100},
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

func TestAccessLineFollowsTheLevel(t *testing.T) {
	var out bytes.Buffer
	l, err := gateway.NewLogs(config.Log{Level: "warn", Format: "json"}, &out, 0)
	if err != nil {
		t.Fatal(err)
	}
	proxy.WriteAccessLine(l.Access, time.Now(), proxy.AccessFields{ID: "a"})
	if out.Len() != 0 {
		t.Fatalf("an access line at log.level warn: %s", out.String())
	}
	l.Level.SetLevel(zap.InfoLevel) // what a reload does
	proxy.WriteAccessLine(l.Access, time.Now(), proxy.AccessFields{ID: "a"})
	if out.Len() == 0 {
		t.Fatal("no access line once the level is info")
	}
	c, err := gateway.NewLogs(config.Log{Level: "info", Format: "console"}, &out, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Access != nil {
		t.Fatal("the console format must go through zap's console encoder")
	}
}

func FuzzAccessLineMatchesZap(f *testing.F) {
	f.Add("0a1b2c3d", "svc", "contacts.list", "POST", "", 200, 200, int64(1500000), int64(55), int64(1100), int64(0))
	f.Add("\"\\\n", "\xff\x00", "é", "x", "forbidden", 403, 0, int64(-1), int64(-5), int64(0), int64(-7200))
	f.Fuzz(func(t *testing.T, id, caller, route, method, code string, status, up int, elapsed, in, out, tz int64) {
		now := time.Unix(1764118923, elapsed&0x3fffffff).In(time.FixedZone("Z", int(tz%86400)))
		fl := proxy.AccessFields{ID: id, Caller: caller, Route: route, Method: method, Code: code,
			Status: status, UpstreamStatus: up, Elapsed: time.Duration(elapsed), BytesIn: in, BytesOut: out}
		fast, z := accessLines(t, now, fl)
		if fast != z {
			t.Fatalf("access line differs from zap's\n got: %q\nwant: %q", fast, z)
		}
	})
}
