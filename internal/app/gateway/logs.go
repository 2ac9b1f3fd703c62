package gateway

import (
	"io"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/proxy"
)

// Logs are the gateway's loggers, built in one place (NewLogs) so that every
// line of a process goes through one encoder and one sink.
type Logs struct {
	// Logger writes everything but audit lines, at Level.
	Logger *zap.Logger
	// Audit writes audit lines to the same sink, always at info: an operator
	// who sets log.level: error to quiet the access log must not lose the
	// record of sensitive calls (docs/logs.md). It is unnamed; New
	// names it "audit" for the proxy.
	Audit *zap.Logger
	// Level is log.level; a config reload changes it while running. Audit
	// does not follow it.
	Level zap.AtomicLevel

	// Access, set for the JSON format, writes the access lines to Logger's
	// sink at Level without going through zap (proxy.AccessLog: the same
	// bytes, cheaper).
	Access *proxy.AccessLog

	// buffered, when set, holds Logger's lines and the access lines until
	// it flushes: on its interval, when full, on Sync, and after each line
	// at warn or above (flushAtWarn).
	buffered *zapcore.BufferedWriteSyncer
}

// logBufferSize is how much Logger's lines may fill before they are written
// without waiting for the flush interval.
const logBufferSize = 256 << 10

// NewLogs builds the loggers of the log section, writing to w (stderr in
// faxgate serve, a buffer in tests). With flushEvery > 0, Logger's info and
// debug lines (the access log above all) are buffered and written at most
// flushEvery apart, or when 256 KiB have gathered, or on Sync: one write(2)
// for many lines instead of one each, and a crash loses at most flushEvery
// of them. A line at warn or above is written, after every line buffered
// before it, before the call that logs it returns (docs/logs.md): the
// reason a process is failing must survive its being killed. Audit lines
// are never buffered: each is written before the request's answer is
// complete.
func NewLogs(c config.Log, w io.Writer, flushEvery time.Duration) (Logs, error) {
	lvl, err := zap.ParseAtomicLevel(c.Level)
	if err != nil {
		return Logs{}, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	var enc zapcore.Encoder
	if c.Format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	// One locked sink for both loggers, so their lines never interleave:
	// the buffer, too, writes whole lines through it.
	sink := zapcore.Lock(zapcore.AddSync(w))
	l := Logs{Audit: zap.New(zapcore.NewCore(enc.Clone(), sink, zapcore.InfoLevel)), Level: lvl}
	main := zapcore.WriteSyncer(sink)
	var core zapcore.Core
	if flushEvery > 0 {
		// flushOnly: a warning flushes the buffer into the sink, which is
		// what a kill cannot undo; an fsync of stderr (a file, when it is
		// redirected to one) held under the buffer's lock would stall
		// every access line behind it.
		l.buffered = &zapcore.BufferedWriteSyncer{WS: flushOnly{sink}, Size: logBufferSize, FlushInterval: flushEvery}
		main = l.buffered
		core = flushAtWarn{zapcore.NewCore(enc, main, lvl), l.buffered}
	} else {
		core = zapcore.NewCore(enc, main, lvl)
	}
	l.Logger = zap.New(core)
	if c.Format != "console" {
		l.Access = &proxy.AccessLog{Out: main, Level: lvl}
	}
	return l, nil
}

// flushAtWarn is a core writing to the buffered sink that flushes it after
// each line at warn or above, so that line and every line buffered before
// it, in their order, are in the sink when the logging call returns.
type flushAtWarn struct {
	zapcore.Core
	buf *zapcore.BufferedWriteSyncer
}

// Level keeps the core's level visible through the wrapper (zap.Logger.Level).
func (c flushAtWarn) Level() zapcore.Level { return zapcore.LevelOf(c.Core) }

func (c flushAtWarn) With(fields []zapcore.Field) zapcore.Core {
	return flushAtWarn{c.Core.With(fields), c.buf}
}

// Check adds c itself, not the wrapped core, so that Write below runs.
func (c flushAtWarn) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c flushAtWarn) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	err := c.Core.Write(ent, fields)
	if ent.Level >= zapcore.WarnLevel {
		// The buffer's own flush errors are dropped as its timed flushes'
		// are: there is nowhere left to report a failing stderr.
		_ = c.buf.Sync()
	}
	return err
}

// flushOnly is a sink whose Sync does nothing: the buffer's Sync writes what
// it holds into it, and that is all a flush needs.
type flushOnly struct{ zapcore.WriteSyncer }

func (flushOnly) Sync() error { return nil }

// Close flushes the loggers and stops the buffer's flushing goroutine.
func (l Logs) Close() {
	l.Sync()
	if l.buffered != nil {
		_ = l.buffered.Stop()
	}
}

// Sync flushes both loggers.
func (l Logs) Sync() {
	if l.Logger != nil {
		_ = l.Logger.Sync()
	}
	if l.Audit != nil {
		_ = l.Audit.Sync()
	}
}

// orNop fills in loggers a caller left nil.
func (l Logs) orNop() Logs {
	if l.Logger == nil {
		l.Logger = zap.NewNop()
	}
	if l.Audit == nil {
		l.Audit = l.Logger
	}
	return l
}
