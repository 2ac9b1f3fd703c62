package proxy

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/tokencache"
)

var errNoToken = errors.New("no valid upstream token")

// authTransport puts the Bearer token on each upstream request at the last
// moment and handles an upstream 401 (docs/tokens.md): the rejected token
// is invalidated (if still current) and the request is resent once with a
// new token when its body can be replayed.
type authTransport struct {
	next        http.RoundTripper
	tokens      tokencache.Source
	metrics     *Metrics
	tracer      trace.Tracer // nil when tracing is off (trace.go)
	retryUnsent int          // upstream.retry_unsent
}

// roundTrip sends req, the outgoing request of ex, with the current token.
// The answer's headers still hold whatever the upstream sent: the relay
// scrubs the token from them (relayHeader).
func (t *authTransport) roundTrip(req *http.Request, ex *exchange) (*http.Response, error) {
	l := &ex.leg
	tok, err := t.tokens.Token(req.Context())
	if err != nil {
		// A caller that left while the token was awaited is a departure
		// like any other (failure.go), not token_unavailable, or the
		// token alerts would fire on callers' impatience.
		l.noToken = l.up.caller == nil || l.up.caller.Err() == nil
		if req.Body != nil {
			// As a RoundTripper would: a resend's reader over the copy
			// holds it until closed.
			req.Body.Close()
		}
		return nil, errNoToken
	}
	req.Header["Authorization"] = tok.HeaderValues()
	l.tok = tok
	start := time.Now()
	resp, err := t.attempt(req, ex)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && ex.out.Target.Route != route.RouteAuth {
		if t.tokens.Invalidate(tok) {
			resent := false
			if replayable(req) {
				var r2 *http.Response
				var err2 error
				if r2, err2, resent = t.resend(req, resp, ex); resent {
					resp, err = r2, err2
				}
			}
			if !resent {
				// The body streamed without a copy (over the resend
				// memory, or too large): the 401 goes to the caller.
				t.metrics.Upstream401Unretried.WithLabelValues(ex.out.Route).Inc()
			}
		}
	}
	l.took = time.Since(start)
	if err != nil {
		return nil, err
	}
	l.upstreamStatus = resp.StatusCode
	return resp, nil
}

// resend repeats req once with a fresh token. resent=false keeps the
// original 401.
func (t *authTransport) resend(req *http.Request, first *http.Response, ex *exchange) (_ *http.Response, _ error, resent bool) {
	tok, err := t.tokens.Token(req.Context())
	if err != nil {
		return nil, nil, false
	}
	r2 := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, nil, false
		}
		r2.Body = body
	}
	// The first answer is dropped: drain a little so the connection can be reused.
	_, _ = io.CopyN(io.Discard, first.Body, 4<<10)
	first.Body.Close()
	r2.Header["Authorization"] = tok.HeaderValues()
	ex.leg.tok = tok
	t.metrics.Upstream401Retries.WithLabelValues(ex.out.Route).Inc()
	resp, err := t.attempt(r2, ex)
	return resp, err, true
}

// attempt sends req once, and again, up to upstream.retry_unsent times, while
// the upstream certainly never received it (unsent: no connection was had,
// or the egress proxy refused) and its body can be sent again, after a short
// jittered backoff that stays within upstream.timeout. A GET without a body
// that may have been received (its connection broke off before an answer)
// is sent again once: reading is safe to repeat. Nothing else is resent here
// (docs/upstream-budget.md#requests-the-vendor-never-saw). Each attempt is a
// CLIENT span of its own.
func (t *authTransport) attempt(req *http.Request, ex *exchange) (*http.Response, error) {
	l := &ex.leg
	retries, resetRetried := 0, false
	for {
		l.connected.Store(false)
		l.attempts++
		span := t.startAttempt(req, ex, l.attempts-1)
		resp, err := t.next.RoundTrip(req)
		endAttempt(span, resp, err)
		if err == nil {
			return resp, nil
		}
		reason := ""
		switch {
		case req.Context().Err() != nil:
		case unsent(l, err) && retries < t.retryUnsent:
			reason, retries = retryUnsent, retries+1
		case !resetRetried && readOnly(req) && l.connected.Load():
			reason, resetRetried = retryReset, true
		}
		if reason == "" {
			return nil, err
		}
		next, ok := again(req, l)
		if !ok {
			return nil, err
		}
		if !backoff(req.Context(), retries) {
			if next.Body != nil {
				next.Body.Close() // a reader over the copy holds it until closed
			}
			return nil, err
		}
		t.metrics.retried(ex.out.Route, reason)
		req = next
	}
}

// The reasons of faxgate_upstream_retries_total.
const (
	retryUnsent    = "unsent"    // the upstream certainly never received the request
	retryReset     = "reset"     // a bodiless GET whose connection broke off, sent again once
	retryThrottled = "throttled" // a vendor 429 waited out (forward.go)
)

// unsent reports whether the attempt that failed with err certainly never
// reached the upstream: no connection was had for it (the dial was refused
// or failed, the TLS handshake failed), or the egress proxy refused it.
func unsent(l *leg, err error) bool {
	var refused *ProxyRefusedError
	return errors.As(err, &refused) || !l.connected.Load()
}

// readOnly reports whether req is a GET or HEAD without a body: sending it
// twice changes nothing upstream.
func readOnly(req *http.Request) bool {
	return (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		(req.Body == nil || req.Body == http.NoBody)
}

// again is req to send once more, with its body from the start: none, a
// fresh reader over the copy the gateway holds (GetBody), or, for a body
// that streams with a copy and was never read (the attempt had no
// connection), the caller's body itself behind a new guard. ok is false
// when the body cannot be sent again.
func again(req *http.Request, l *leg) (*http.Request, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	r2 := req.Clone(req.Context())
	if req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			r2.Body = body
			return r2, true
		}
	}
	if l.replay != nil && l.replay.untouched() {
		l.retryGuard = &guardedBody{rc: l.guard.rc}
		r2.Body = l.retryGuard
		return r2, true
	}
	return nil, false
}

// backoff waits before resend n (1, 2, ...): 25 ms doubling, at most 400 ms,
// half of it random, unless the wait would pass the exchange's deadline; it
// reports whether the resend may go.
func backoff(ctx context.Context, n int) bool {
	d := min(25*time.Millisecond<<max(n-1, 0), 400*time.Millisecond)
	d = d/2 + rand.N(d/2+1)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// replayable reports whether req's body can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// startAttempt is called just before an upstream attempt (resend: 0 for
// the first, 1 for the resend after a 401). For a sampled request it
// starts the attempt's CLIENT span and sends its context upstream as
// traceparent, so the upstream's parent is that span; for an unsampled
// one the SERVER span's context goes up, marked not sampled. With tracing
// off it does nothing, and the caller's traceparent passes through.
func (t *authTransport) startAttempt(req *http.Request, ex *exchange, resend int) trace.Span {
	if ex.span == nil {
		return nil
	}
	ctx := req.Context()
	// The caller's tracestate goes up only as part of a trace it belongs
	// to: Inject writes it back from the span context, where a valid
	// traceparent put it; beside an invalid one it is dropped, as W3C
	// Trace Context asks.
	delete(req.Header, "Tracestate")
	if !ex.span.IsRecording() {
		traceContext.Inject(ctx, headerCarrier(req.Header))
		return nil
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs,
		attribute.String("http.request.method", req.Method),
		attribute.String("server.address", req.URL.Hostname()))
	if p := req.URL.Port(); p != "" {
		if n, err := strconv.Atoi(p); err == nil {
			attrs = append(attrs, attribute.Int("server.port", n))
		}
	}
	name := req.Method
	if tmpl := ex.leg.template; tmpl != "" {
		// Never url.full: the query string stays out of traces.
		attrs = append(attrs, attribute.String("url.template", tmpl))
		name += " " + tmpl
	}
	if resend > 0 {
		attrs = append(attrs, attribute.Int("http.request.resend_count", resend))
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	traceContext.Inject(ctx, headerCarrier(req.Header))
	return span
}

// endAttempt ends an attempt's CLIENT span with the upstream's status. A
// transport error is described by a fixed text: its message would quote
// the URL, query string included.
func endAttempt(span trace.Span, resp *http.Response, err error) {
	if span == nil {
		return
	}
	switch {
	case err != nil:
		span.SetStatus(codes.Error, "no answer from the upstream")
	default:
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		if resp.StatusCode >= 400 {
			span.SetStatus(codes.Error, "upstream answered "+strconv.Itoa(resp.StatusCode))
		}
	}
	span.End()
}
