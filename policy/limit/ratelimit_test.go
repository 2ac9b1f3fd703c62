package limit

import (
	"context"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/config"
)

type manualClock struct{ t time.Time }

func (c *manualClock) now() time.Time { return c.t }

func TestLocalRateLimiter(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	callers := []config.Caller{{Name: "a", RateLimit: &config.Limit{RPS: 2, Burst: 3}}, {Name: "b"}}
	l := NewLocalRateLimiter(callers, config.Limit{RPS: 1, Burst: 1}, clk.now)
	ctx := context.Background()
	for i, want := range []RateResult{
		{Allowed: true, Limit: 3, Remaining: 2, Reset: 500 * time.Millisecond},
		{Allowed: true, Limit: 3, Remaining: 1, Reset: time.Second},
		{Allowed: true, Limit: 3, Remaining: 0, Reset: 1500 * time.Millisecond},
		{Allowed: false, Limit: 3, Remaining: 0, Reset: 1500 * time.Millisecond, RetryAfter: 500 * time.Millisecond},
	} {
		if got := l.Allow(ctx, "a"); got != want {
			t.Fatalf("request %d: %+v, want %+v", i, got, want)
		}
	}
	if got := l.Allow(ctx, "b"); !got.Allowed || got.Limit != 1 {
		t.Fatalf("caller b (default limit) = %+v: buckets are per caller", got)
	}
	clk.t = clk.t.Add(500 * time.Millisecond) // 2 rps: one token back
	if got := l.Allow(ctx, "a"); !got.Allowed {
		t.Fatalf("after refill: %+v", got)
	}
}

func TestReloadKeepsRateLimitState(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := config.Default()
	cfg.Callers.List = []config.Caller{{Name: "a", CIDRs: []string{"10.0.0.0/8"}, Allow: []string{"*"},
		RateLimit: &config.Limit{RPS: 1, Burst: 2}}}
	first, err := NewRateLimiter(rateCfg(&cfg), clk.now, Deps{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first.Allow(ctx, "a")
	first.Allow(ctx, "a") // burst used up
	second, err := NewRateLimiter(rateCfg(&cfg), clk.now, Deps{}, first)
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Allow(ctx, "a"); got.Allowed {
		t.Fatal("a reload refilled the caller's burst")
	}
	cfg.Callers.List[0].RateLimit = &config.Limit{RPS: 10, Burst: 20}
	third, err := NewRateLimiter(rateCfg(&cfg), clk.now, Deps{}, second)
	if err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(100 * time.Millisecond) // one token at the new rate
	if got := third.Allow(ctx, "a"); !got.Allowed || got.Limit != 20 {
		t.Fatalf("a changed limit does not apply after reload: %+v", got)
	}
	fresh, _ := NewRateLimiter(rateCfg(&cfg), clk.now, Deps{}, nil)
	if got := fresh.Allow(ctx, "a"); !got.Allowed || got.Remaining != 19 {
		t.Fatalf("without a previous limiter the bucket starts full: %+v", got)
	}
}
