package gateway

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"
)

// inOrder reports whether every one of want is in s, each after the one
// before it.
func inOrder(s string, want ...string) bool {
	for _, w := range want {
		i := strings.Index(s, w)
		if i < 0 {
			return false
		}
		s = s[i+len(w):]
	}
	return true
}

// TestWarnIsWrittenBeforeItsCallReturns: with a flush interval no test
// outlives, an info line waits in the buffer; a warn or error line is in the
// sink when its call returns, after the lines buffered before it (the
// access writer's among them), in order. A process killed right after
// logging a warning must not lose it (docs/logs.md).
func TestWarnIsWrittenBeforeItsCallReturns(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		t.Run(format, func(t *testing.T) {
			var out syncbuf.Buffer
			logs, err := NewLogs(config.Log{Level: "info", Format: format}, &out, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			defer logs.Close()
			log := logs.Logger.Named("token")

			log.Info("first info")
			if logs.Access != nil {
				// The access writer shares the buffer; its lines keep their place.
				_, _ = logs.Access.Out.Write([]byte(`{"level":"info","logger":"access","msg":"request"}` + "\n"))
			}
			log.Info("second info")
			if got := out.String(); got != "" {
				t.Fatalf("info lines were written at once with a 1h flush interval:\n%s", got)
			}
			log.Warn("token renewal failed")
			want := []string{"first info", "second info", "token renewal failed"}
			if logs.Access != nil {
				want = []string{"first info", `"msg":"request"`, "second info", "token renewal failed"}
			}
			if got := out.String(); !inOrder(got, want...) {
				t.Fatalf("right after Warn returned, the sink holds:\n%s\nwant %q in that order", got, want)
			}

			// Every way into the core: a derived logger, a checked entry, a
			// level raised by an option, and error as well as warn.
			for i, write := range []func(){
				func() { log.With(zap.String("op", "get")).Warn("with fields") },
				func() {
					if ce := log.Check(zap.WarnLevel, "checked entry"); ce != nil {
						ce.Write()
					}
				},
				func() { log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)).Warn("raised level") },
				func() { log.Error("upstream rejected the API secret key") },
			} {
				before := out.Len()
				log.Info("buffered")
				if out.Len() != before {
					t.Fatalf("case %d: an info line was written at once", i)
				}
				write()
				if got := out.String()[before:]; !strings.Contains(got, "buffered") || strings.Count(got, "\n") != 2 {
					t.Errorf("case %d: after the call the sink got:\n%s\nwant the buffered info line and the warning", i, got)
				}
			}
			for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if format == "json" && (!strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}")) {
					t.Errorf("a torn line: %q", l)
				}
			}
		})
	}
}

// TestWarnFlushFollowsLevelReload: log.level changes while running (config
// reload) still decide what is logged, through the flushing core; a line
// the level drops flushes nothing.
func TestWarnFlushFollowsLevelReload(t *testing.T) {
	var out syncbuf.Buffer
	logs, err := NewLogs(config.Log{Level: "info", Format: "json"}, &out, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	log := logs.Logger.Named("reload")
	if got := log.Level(); got != zapcore.InfoLevel {
		t.Errorf("Logger.Level() = %v, want info", got)
	}

	logs.Level.SetLevel(zapcore.ErrorLevel)
	if got := log.Level(); got != zapcore.ErrorLevel {
		t.Errorf("Logger.Level() after reload = %v, want error", got)
	}
	log.Info("dropped info")
	log.Warn("dropped warn")
	if got := out.String(); got != "" {
		t.Fatalf("at level error, the sink got:\n%s", got)
	}
	log.Error("kept error")
	if got := out.String(); strings.Contains(got, "dropped") || !strings.Contains(got, "kept error") {
		t.Fatalf("at level error, the sink holds:\n%s\nwant the error line only", got)
	}

	logs.Level.SetLevel(zapcore.DebugLevel)
	log.Debug("debug line")
	if strings.Contains(out.String(), "debug line") {
		t.Fatalf("a debug line was written at once")
	}
	log.Warn("warn line")
	if got := out.String(); !inOrder(got, "kept error", "debug line", "warn line") {
		t.Fatalf("at level debug, the sink holds:\n%s\nwant the debug line flushed by the warning", got)
	}
}
