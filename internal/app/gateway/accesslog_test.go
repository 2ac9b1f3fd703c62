package gateway

import (
	"bytes"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/config"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                         { return c.t }
func (c fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// accessLineGolden is an access line as proxy.AccessLog writes it without
// zap; proxy's TestAccessLineFormat pins the same bytes.
const accessLineGolden = `{"level":"info","ts":"2026-11-26T01:02:03.4506Z","logger":"access","msg":"request",` +
	`"request_id":"0a1b2c3d","caller":"billing","route":"contacts.list","method":"POST","status":200,` +
	`"duration_ms":1.234,"wait_ms":0,"bytes_in":55,"bytes_out":1100,"upstream_status":200,"error":""}` + "\n"

// The JSON format's encoder writes an access line exactly as proxy.AccessLog
// does, which copies its bytes rather than going through zap: a change to
// the encoder here that the fast writer does not follow fails this test.
func TestJSONAccessLineIsTheFastWritersLine(t *testing.T) {
	var out bytes.Buffer
	l, err := NewLogs(config.Log{Level: "info", Format: "json"}, &out, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 1, 2, 3, 450600000, time.UTC)
	l.Logger.Named("access").WithOptions(zap.WithClock(fixedClock{now})).Info("request",
		zap.String("request_id", "0a1b2c3d"), zap.String("caller", "billing"), zap.String("route", "contacts.list"),
		zap.String("method", "POST"), zap.Int("status", 200), zap.Float64("duration_ms", 1.234), zap.Float64("wait_ms", 0),
		zap.Int64("bytes_in", 55), zap.Int64("bytes_out", 1100), zap.Int("upstream_status", 200), zap.String("error", ""))
	if out.String() != accessLineGolden {
		t.Errorf("the JSON encoder's access line\n got: %s\nwant: %s", out.String(), accessLineGolden)
	}
	if l.Access == nil {
		t.Fatal("the JSON format has no AccessLog")
	}
	out.Reset()
	if _, err := l.Access.Out.Write([]byte("line\n")); err != nil || out.String() != "line\n" {
		t.Errorf("AccessLog.Out is not the logs' sink: wrote %q, %v", out.String(), err)
	}
}

// The access lines follow log.level, also when a reload changes it; the
// console format has no fast writer (its lines go through zap's console
// encoder).
func TestAccessLogFollowsTheLevel(t *testing.T) {
	l, err := NewLogs(config.Log{Level: "warn", Format: "json"}, &bytes.Buffer{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Access.Level.Enabled(zap.InfoLevel) {
		t.Fatal("access lines enabled at log.level warn")
	}
	l.Level.SetLevel(zap.InfoLevel) // what a reload does
	if !l.Access.Level.Enabled(zap.InfoLevel) {
		t.Fatal("access lines still disabled once the level is info")
	}
	c, err := NewLogs(config.Log{Level: "info", Format: "console"}, &bytes.Buffer{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Access != nil {
		t.Fatal("the console format must go through zap's console encoder")
	}
}
