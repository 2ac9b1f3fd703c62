package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"
)

// TestBufferedLogsFlushAndAuditNever: with a flush interval, access lines
// wait in the buffer (one write for many) until the interval or Close; an
// audit line is written at once, whatever is buffered.
func TestBufferedLogsFlushAndAuditNever(t *testing.T) {
	var out syncbuf.Buffer
	logs, err := NewLogs(config.Log{Level: "info", Format: "json"}, &out, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	logs.Logger.Named("access").Info("request")
	logs.Audit.Named("audit").Info("audit")
	if got := out.String(); strings.Contains(got, `"msg":"request"`) || !strings.Contains(got, `"msg":"audit"`) {
		t.Fatalf("right after logging:\n%s\nwant the audit line only", got)
	}
	eventually.Eventually(t, 5*time.Second, "the access line flushed", func() bool {
		return strings.Contains(out.String(), `"msg":"request"`)
	})
	logs.Logger.Info("last words")
	logs.Close()
	if !strings.Contains(out.String(), "last words") {
		t.Errorf("Close did not flush:\n%s", out.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") {
			t.Errorf("a torn line: %q", l)
		}
	}
}
