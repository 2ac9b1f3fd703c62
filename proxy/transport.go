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

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeFrom(req.Context())
	tok, err := t.tokens.Token(req.Context())
	if err != nil {
		if ex.up.caller != nil && ex.up.caller.Err() != nil {
			// The caller left while the token was awaited: a 499 like any
			// other departure, not token_unavailable, or the token alerts
			// would fire on callers' impatience.
			return nil, err
		}
		ex.fail = errTokenUnavailable
		return nil, errNoToken
	}
	req.Header["Authorization"] = tok.HeaderValues()
	ex.tok = tok
	span := t.startAttempt(req, ex, 0)
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	endAttempt(span, resp, err)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && ex.target.Route != route.RouteAuth {
		if t.tokens.Invalidate(tok) {
			resent := false
			if replayable(req) {
				var r2 roundTripResult
				var tok2 *tokencache.Token
				if r2, tok2, resent = t.resend(req, resp, ex); resent {
					resp, err, tok = r2.resp, r2.err, tok2
				}
			}
			if !resent {
				// The body streamed without a copy (over the resend
				// memory, or too large): the 401 goes to the caller.
				t.metrics.Upstream401Unretried.WithLabelValues(ex.route).Inc()
			}
		}
	}
	ex.pm.upstreamDuration().Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	ex.upstreamStatus = resp.StatusCode
	scrubResponseHeaders(resp.Header, tok.Value.Reveal())
	return resp, nil
}

type roundTripResult struct {
	resp *http.Response
	err  error
}

// resend repeats req once with a fresh token. ok=false keeps the original 401.
func (t *authTransport) resend(req *http.Request, first *http.Response, ex *exchange) (roundTripResult, *tokencache.Token, bool) {
	tok, err := t.tokens.Token(req.Context())
	if err != nil {
		return roundTripResult{}, nil, false
	}
	r2 := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return roundTripResult{}, nil, false
		}
		r2.Body = body
	}
	// The first answer is dropped: drain a little so the connection can be reused.
	_, _ = io.CopyN(io.Discard, first.Body, 4<<10)
	first.Body.Close()
	r2.Header["Authorization"] = tok.HeaderValues()
	ex.tok = tok
	t.metrics.Upstream401Retries.WithLabelValues(ex.route).Inc()
	span := t.startAttempt(r2, ex, 1)
	resp, err := t.next.RoundTrip(r2)
	endAttempt(span, resp, err)
	return roundTripResult{resp, err}, tok, true
}

// replayable reports whether req's body can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}
