package redisconn

// Redis Cluster failover, as go-redis v9 handles it and what faxgate adds
// (docs/deployment.md, What faxgate adds to go-redis).
//
// go-redis routes each command by its slot through a slot map it reads
// with CLUSTER SLOTS. It reads the map again (asynchronously, coalesced)
// only on a MOVED or ASK redirect, on a READONLY answer, or when a command
// finds the map older than ClusterStateReloadInterval (a minute by
// default). A primary that is killed answers nothing: no MOVED ever comes,
// and every command for its slots goes on failing on the dead address,
// retried and marked failing but never rerouted, until the map is a minute
// old; a quiet client keeps the old map for as long as it is quiet. The
// replica promoted a few seconds after the kill is not used meanwhile.
//
// faxgate adds two things. A hook reads the map again as soon as a command
// fails without a Redis answer (a refused or timed-out connection) or with
// CLUSTERDOWN, TRYAGAIN, MASTERDOWN or LOADING, so the first failure after
// the promotion reroutes; reloads stay coalesced (one at a time, 200 ms
// apart) however many commands fail. And Conn.Run reads it every
// WatchEvery, which is also the map's maximum age, so a client that sent
// nothing during the failover routes right from its next command.

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// reloadOnFailure is the hook: after a command (or pipeline) that failed in
// a way a new slot map may cure, it asks go-redis for one.
type reloadOnFailure struct{ cc *redis.ClusterClient }

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if stale(err) {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if stale(c.Err()) {
				err = c.Err()
				break
			}
		}
		if stale(err) {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

// stale reports whether err may come from a slot map that no longer
// matches the cluster: no answer at all (the node is dead, unreachable or
// too slow), or an answer of a cluster in the middle of a failover. A
// caller that went away, a missing key and an error of the command itself
// (a script's error, NOSCRIPT, WRONGTYPE) say nothing about the map.
func stale(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range []string{"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	return true
}

// clusterPrimaries are the addresses of the nodes that hold slots, sorted,
// as one node's CLUSTER SLOTS says.
func clusterPrimaries(ctx context.Context, cc *redis.ClusterClient) ([]string, error) {
	// CLUSTER SLOTS, as go-redis itself reads the map: CLUSTER SHARDS, its
	// successor, needs Redis 7, and managed services still run 6.
	//lint:ignore SA1019 see above
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range slots {
		if len(s.Nodes) > 0 && !slices.Contains(out, s.Nodes[0].Addr) {
			out = append(out, s.Nodes[0].Addr)
		}
	}
	slices.Sort(out)
	return out, nil
}
