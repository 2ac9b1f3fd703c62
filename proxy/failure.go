package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/route"
)

// How the forward leg can end without an answer to relay, classified once
// (classify), and the refusal each earns (failed). Whether the upstream may
// have received the request is what decides whether it could be sent again:
// only a request that certainly never reached it is unsent.

// failure is how a forward leg failed.
type failure uint8

const (
	// failUnsent: no connection to the upstream (or its proxy) was had:
	// the dial was refused or failed, the TLS handshake failed; or the
	// egress proxy refused the tunnel or the request. The upstream
	// certainly never saw the request.
	failUnsent failure = iota
	// failMaybeSent: a connection was had and the exchange broke off (a
	// reset, an early close) before an answer's head: the upstream may
	// have received the request, and acted on it.
	failMaybeSent
	// failDeadline: upstream.timeout passed.
	failDeadline
	// failCallerGone: the caller left; nobody reads an answer.
	failCallerGone
	// failNoToken: no valid token could be had to send the request with.
	failNoToken
	// failBody: reading the caller's body failed (too large, too slow,
	// broken off); the leg's requestBody holds the refusal.
	failBody
	// failNotForwardable: the upstream switched protocols, which the
	// gateway never forwards.
	failNotForwardable
)

var errNotForwardable = errors.New("the upstream switched protocols")

// classify is the one place that works out how ex's forward leg failed with
// err, in this order: the caller's body, the token, a protocol switch, the
// timeout, the caller leaving, then whether a connection was had.
func classify(ex *exchange, err error) failure {
	l := &ex.leg
	switch {
	case l.body.err != nil:
		return failBody
	case l.noToken:
		return failNoToken
	case err == errNotForwardable:
		return failNotForwardable
	case l.deadline != nil && context.Cause(l.deadline) == context.DeadlineExceeded:
		return failDeadline
	case l.up.caller != nil && l.up.caller.Err() != nil:
		return failCallerGone
	case unsent(l, err):
		return failUnsent
	default:
		return failMaybeSent
	}
}

// failed is the refusal a forward leg that failed with err earns.
func (h *Handler) failed(ex *exchange, err error) *route.Error {
	switch classify(ex, err) {
	case failBody:
		return ex.leg.body.err
	case failNoToken:
		return errTokenUnavailable
	case failDeadline:
		l := &ex.leg
		if l.body.rc != nil && !l.body.eof.Load() && l.upstreamStatus == 0 {
			// The body was still arriving when time ran out: the upstream
			// could not have answered it; the caller was too slow.
			return errBodyTimeout
		}
		return errUpstreamTimeout
	case failCallerGone:
		return policy.ErrClientClosed
	case failNotForwardable:
		return errUpstreamSwitched
	default: // unsent or maybe sent
		return errUpstreamUnavailable
	}
}

// The forward leg's refusals (docs/callers-and-policy.md).
var (
	errTokenUnavailable = &route.Error{Status: http.StatusServiceUnavailable, Code: "token_unavailable",
		Message: "no valid upstream token is available"}
	errUpstreamUnavailable = &route.Error{Status: http.StatusBadGateway, Code: "upstream_unavailable",
		Message: "the upstream could not be reached"}
	errUpstreamTimeout = &route.Error{Status: http.StatusGatewayTimeout, Code: "upstream_timeout",
		Message: "the upstream did not answer within upstream.timeout"}
	errUpstreamSwitched = &route.Error{Status: http.StatusBadGateway, Code: "upstream_unavailable",
		Message: "the upstream switched protocols, which the gateway does not forward"}
)
