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
	// record of sensitive calls (contract section 9). It is unnamed; New
	// names it "audit" for the proxy.
	Audit *zap.Logger
	// Level is log.level; a config reload changes it while running. Audit
	// does not follow it.
	Level zap.AtomicLevel

	// Access, set for the JSON format, writes the access lines to Logger's
	// sink at Level without going through zap (proxy.AccessLog: the same
	// bytes, cheaper).
	Access *proxy.AccessLog

	// buffered, when set, holds Logger's lines until it flushes.
	buffered *zapcore.BufferedWriteSyncer
}

// logBufferSize is how much Logger's lines may fill before they are written
// without waiting for the flush interval.
const logBufferSize = 256 << 10

// NewLogs builds the loggers of the log section, writing to w (stderr in
// faxgate serve, a buffer in tests). With flushEvery > 0, Logger's lines
// (the access log above all) are buffered and written at most flushEvery
// apart, or when 256 KiB have gathered, or on Sync: one write(2) for many
// lines instead of one each, and a crash loses at most flushEvery of them.
// Audit lines are never buffered: each is written before the request's
// answer is complete.
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
	if flushEvery > 0 {
		l.buffered = &zapcore.BufferedWriteSyncer{WS: sink, Size: logBufferSize, FlushInterval: flushEvery}
		main = l.buffered
	}
	l.Logger = zap.New(zapcore.NewCore(enc, main, lvl))
	if c.Format != "console" {
		l.Access = &proxy.AccessLog{Out: main, Level: lvl}
	}
	return l, nil
}

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
