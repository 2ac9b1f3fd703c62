package tokencache

// Updates of the Redis store: the pub/sub subscription that tells a replica
// another one saved a token.

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/base/background"
	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/redisconn"
)

// DefaultSubscriptionIdle is RedisOptions.SubscriptionIdle when unset.
const DefaultSubscriptionIdle = 10 * time.Second

// The bounds of the pause between attempts to resubscribe while Redis is
// unreachable.
const (
	subBackoffMin = 100 * time.Millisecond
	subBackoffMax = 2 * time.Second
)

// Updates implements Shared. It pattern-subscribes to every account's update
// channel under the prefix (PSUBSCRIBE P*:updates) and signals only for the
// channel of the current secret. A pattern rather than one channel means a
// key rotation needs no resubscription: the next message is simply judged
// against the new fingerprint.
//
// The subscription reconnects after an outage; since messages published
// meanwhile are lost, it also signals once it is subscribed again, so the
// manager re-reads the token it may have missed.
func (s *RedisStore) Updates(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for first := true; ctx.Err() == nil; first = false {
			s.watch(ctx, out, first)
		}
	}()
	return out
}

// watch runs one subscription until ctx ends or it panics. Only the very
// first subscription's confirmation is no news: any later one follows a
// failure, during which notifications may have been lost.
func (s *RedisStore) watch(ctx context.Context, out chan<- struct{}, first bool) {
	panicked := false
	defer func() {
		if panicked {
			s.report(errors.New("subscription panicked"))
			clock.Sleep(ctx, clock.Real{}, subBackoffMax)
		}
	}()
	defer background.Guard(s.log, s.panics, "token_updates", "resubscribing", &panicked)

	sub := newSubscription(ctx, s.client, redisconn.EscapeGlob(s.prefix)+"*:updates", s.timeout)
	defer sub.close()

	signal := func() {
		select {
		case out <- struct{}{}:
		default: // one pending signal is as good as several
		}
	}
	quiet := first
	pinged := false
	backoff := subBackoffMin
	fail := func(err error) {
		s.report(err)
		quiet = false
		clock.Sleep(ctx, clock.Real{}, backoff)
		backoff = min(2*backoff, subBackoffMax)
	}
	for ctx.Err() == nil {
		msg, err := sub.ps().ReceiveTimeout(ctx, s.subIdle)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !isTimeout(err) {
				fail(err) // the next Receive reconnects and resubscribes
				continue
			}
			if pinged {
				// No answer to the last PING for a whole idle period: the
				// connection is gone without having said so. Start afresh.
				fail(errors.New("no answer to PING on the subscription"))
				sub.renew()
				pinged = false
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, s.timeout)
			err := sub.ps().Ping(pctx)
			cancel()
			if err != nil {
				fail(err)
			}
			pinged = err == nil
			continue
		}
		backoff, pinged = subBackoffMin, false
		switch m := msg.(type) {
		case *redis.Subscription:
			if !quiet {
				signal()
			}
			quiet = true
		case *redis.Message:
			if s.ours(m.Channel) {
				signal()
			}
		}
	}
}

// ours reports whether a notification on channel concerns the current secret.
// When the secret cannot be read it errs on the side of a signal.
func (s *RedisStore) ours(channel string) bool {
	a, err := s.account()
	return err != nil || a.channel == channel
}

func (s *RedisStore) report(err error) {
	if s.onError != nil {
		s.onError(storeErr("subscribe", err))
	}
}

// subscription is a go-redis PubSub that can be replaced, and that is closed
// as soon as ctx ends so a blocked Receive returns.
type subscription struct {
	ctx     context.Context
	client  redis.UniversalClient
	pattern string
	timeout time.Duration

	cur  atomic.Pointer[redis.PubSub]
	stop func() bool
}

func newSubscription(ctx context.Context, c redis.UniversalClient, pattern string, timeout time.Duration) *subscription {
	s := &subscription{ctx: ctx, client: c, pattern: pattern, timeout: timeout}
	s.renew()
	s.stop = context.AfterFunc(ctx, func() { _ = s.ps().Close() })
	return s
}

func (s *subscription) ps() *redis.PubSub { return s.cur.Load() }

// renew replaces the PubSub with a new one. go-redis records the pattern even
// when the first PSUBSCRIBE fails (Redis down) and subscribes on the next
// Receive, so this never blocks longer than one dial.
func (s *subscription) renew() {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	old := s.cur.Swap(s.client.PSubscribe(ctx, s.pattern))
	if old != nil {
		_ = old.Close()
	}
	if s.ctx.Err() != nil {
		// ctx ended during the swap; AfterFunc may have closed the old one.
		_ = s.ps().Close()
	}
}

func (s *subscription) close() {
	if s.stop != nil {
		s.stop()
	}
	_ = s.ps().Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
