package proxy

import (
	"errors"
	"io"
	"net/http"
	"time"

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
	ex.pm.upstreamDuration().Observe(time.Since(start).Seconds())
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
