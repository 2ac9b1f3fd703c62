package gateway

import (
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/config"
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
}

// NewLogs builds the loggers of the log section, writing to w (stderr in
// faxgate serve, a buffer in tests).
func NewLogs(c config.Log, w io.Writer) (Logs, error) {
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
	// One locked sink for both loggers, so their lines never interleave.
	sink := zapcore.Lock(zapcore.AddSync(w))
	return Logs{
		Logger: zap.New(zapcore.NewCore(enc, sink, lvl)),
		Audit:  zap.New(zapcore.NewCore(enc.Clone(), sink, zapcore.InfoLevel)),
		Level:  lvl,
	}, nil
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
