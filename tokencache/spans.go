package tokencache

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/faxgate/faxgate/internal/base/tracing"
)

// RenewSpan is the name of a renewal's root span (docs/tracing.md). The
// gateway's sampler records every trace it roots, whatever sample_ratio
// says: renewals are few, and each one matters.
const RenewSpan = "token.renew"

// resultOf is an attempt's faxgate.result, the words of
// faxgate_token_refresh_total.
func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrInvalidKey):
		return "invalid_key"
	}
	return "error"
}

// endSpan ends span with its result. The error itself is not recorded:
// a token call's error may quote the upstream's answer, and a store's its
// reply; a fixed description says what failed.
func endSpan(span trace.Span, err error, result string) {
	span.SetAttributes(tracing.Result.String(result))
	if err != nil {
		span.SetStatus(codes.Error, "failed: "+result)
	}
	span.End()
}

// tracedShared records the shared store's calls as spans under the
// renewal's ("token.store.load", "token.store.lease", ...), with
// db.system.name: redis. Updates makes none: it is a subscription, not a
// call.
type tracedShared struct {
	Shared
	tracer trace.Tracer
}

var storeSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(tracing.Redis)}

func (s tracedShared) span(ctx context.Context, op string) (context.Context, trace.Span) {
	return tracing.Child(ctx, s.tracer, "token.store."+op, storeSpan...)
}

func endStoreSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "token store call failed")
	}
	span.End()
}

func (s tracedShared) Load(ctx context.Context) (*Token, error) {
	ctx, span := s.span(ctx, "load")
	tok, err := s.Shared.Load(ctx)
	endStoreSpan(span, err)
	return tok, err
}

func (s tracedShared) Save(ctx context.Context, tok *Token) (bool, error) {
	ctx, span := s.span(ctx, "save")
	ok, err := s.Shared.Save(ctx, tok)
	endStoreSpan(span, err)
	return ok, err
}

func (s tracedShared) DeleteIf(ctx context.Context, tok *Token) (bool, error) {
	ctx, span := s.span(ctx, "delete")
	ok, err := s.Shared.DeleteIf(ctx, tok)
	endStoreSpan(span, err)
	return ok, err
}

func (s tracedShared) Lease(ctx context.Context, ttl time.Duration) (Lease, bool, error) {
	sctx, span := s.span(ctx, "lease")
	l, ok, err := s.Shared.Lease(sctx, ttl)
	if span.IsRecording() {
		span.SetAttributes(tracing.Result.String(map[bool]string{true: "acquired", false: "busy"}[ok]))
	}
	endStoreSpan(span, err)
	if l != nil {
		l = tracedLease{l, s}
	}
	return l, ok, err
}

// tracedLease records the lease's extensions and release.
type tracedLease struct {
	Lease
	s tracedShared
}

func (l tracedLease) Extend(ctx context.Context, ttl time.Duration) (bool, error) {
	ctx, span := l.s.span(ctx, "extend")
	ok, err := l.Lease.Extend(ctx, ttl)
	endStoreSpan(span, err)
	return ok, err
}

func (l tracedLease) Release(ctx context.Context) error {
	ctx, span := l.s.span(ctx, "release")
	err := l.Lease.Release(ctx)
	endStoreSpan(span, err)
	return err
}
