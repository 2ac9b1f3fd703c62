package proxy

import (
	"errors"
	"io"
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
	next    http.RoundTripper
	tokens  tokencache.Source
	metrics *Metrics
	tracer  trace.Tracer // nil when tracing is off (trace.go)
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
		return nil, errNoToken
	}
	req.Header["Authorization"] = tok.HeaderValues()
	l.tok = tok
	span := t.startAttempt(req, ex, 0)
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	endAttempt(span, resp, err)
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
	span := t.startAttempt(r2, ex, 1)
	resp, err := t.next.RoundTrip(r2)
	endAttempt(span, resp, err)
	return resp, err, true
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
