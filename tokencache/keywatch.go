package tokencache

import (
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// WatchKeyFile polls path every interval and signals (best effort, buffered
// 1) when its content changes, so a key rotated on disk is tried at once by a
// replica whose old key was rejected. Polling rather than inotify: Kubernetes
// swaps Secret volumes through symlinks, which polling the content survives.
// The content is only hashed in memory, never kept or logged.
func WatchKeyFile(ctx context.Context, path string, interval time.Duration, clock Clock) <-chan struct{} {
	out := make(chan struct{}, 1)
	go func() {
		last, _ := fileDigest(path)
		for {
			t := clock.NewTimer(interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			d, err := fileDigest(path)
			if err != nil || d == last {
				continue
			}
			last = d
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}

func fileDigest(path string) ([32]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}
