package tokencache

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/filedigest"
)

// KeyWatcher polls the API key file and signals (best effort, buffered 1)
// when its content changes, so a key rotated on disk is tried at once by a
// replica whose old key was rejected. Polling rather than inotify:
// Kubernetes swaps Secret volumes through symlinks, which polling the content
// survives. The content is only hashed in memory, never kept or logged.
type KeyWatcher struct {
	path     string
	interval time.Duration
	clock    clock.Clock
	log      *zap.Logger
	changed  chan struct{}
	last     filedigest.Digest // owned by Run's goroutine after construction

	// Panics, set before Run, counts the panics recovered in the polling
	// (faxgate_background_panics_total); nil counts nothing.
	Panics background.Counter
}

// NewKeyWatcher hashes the file as it is now; Run reports changes from there.
func NewKeyWatcher(path string, interval time.Duration, clock clock.Clock, log *zap.Logger) *KeyWatcher {
	if log == nil {
		log = zap.NewNop()
	}
	w := &KeyWatcher{path: path, interval: interval, clock: clock, log: log, changed: make(chan struct{}, 1)}
	w.last, _ = filedigest.Of(path)
	return w
}

// Changed signals a content change; it is Options.KeyChanged of the Manager.
func (w *KeyWatcher) Changed() <-chan struct{} { return w.changed }

// Run polls until ctx ends. A panic (a broken clock, say) is logged and the
// polling resumes one interval later: a dead watcher would leave a replica
// with a rejected key waiting out its whole backoff after a rotation.
func (w *KeyWatcher) Run(ctx context.Context) {
	background.Loop(ctx, w.log, w.Panics, "key_watch", func(ctx context.Context) bool { return clock.Sleep(ctx, w.clock, w.interval) }, w.poll)
}

func (w *KeyWatcher) poll(ctx context.Context) {
	for clock.Sleep(ctx, w.clock, w.interval) {
		d, err := filedigest.Of(w.path)
		if err != nil || d == w.last {
			continue
		}
		w.last = d
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

// WatchKeyFile starts a KeyWatcher on path in its own goroutine, until ctx
// ends, and returns its Changed channel.
func WatchKeyFile(ctx context.Context, path string, interval time.Duration, clock clock.Clock, log *zap.Logger) <-chan struct{} {
	w := NewKeyWatcher(path, interval, clock, log)
	go w.Run(ctx)
	return w.Changed()
}
