package redisconn

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// EscapeGlob quotes the characters that Redis glob patterns (SCAN MATCH,
// PSUBSCRIBE) treat specially, so that a key prefix holding them matches
// only itself.
func EscapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// errStop ends a scan early; it is not an error.
var errStop = errors.New("stop")

// ScanPrefix calls fn with every key starting with prefix until fn returns
// false. On Redis Cluster every master is scanned, concurrently, so fn must
// be safe for concurrent use; elsewhere the one node (the sentinel's
// master) is. A key met twice (a slot moving during the scan) is possible;
// callers deduplicate or tolerate it.
func ScanPrefix(ctx context.Context, client redis.UniversalClient, prefix string, fn func(string) bool) error {
	match := EscapeGlob(prefix) + "*"
	node := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, match, 1000).Iterator()
		for it.Next(ctx) {
			if !fn(it.Val()) {
				return errStop
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return node(ctx, c) })
	} else {
		err = node(ctx, client)
	}
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}
