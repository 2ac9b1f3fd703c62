package proxy

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/proxy/listener"
	"github.com/faxgate/faxgate/tokencache"
)

// exchange is one request's state, allocated once per request, in three
// parts kept apart: what the request is (policy.Facts and the request's
// identity below), what was decided about it (policy.Outcome), and the
// forward leg's scratch memory (leg). It also holds what would otherwise be
// allocations of their own (the response writer, the upstream leg's
// context, the outgoing URL, the body readers).
type exchange struct {
	h *Handler

	// What the request is: set when it arrives, read by every stage.
	start    time.Time
	id       string
	idHeader [1]string     // X-Request-Id's value slice, shared by the answer and the upstream request
	method   string        // the method's metrics label (metrics.Method)
	conn     listener.Conn // the listener's connection under the request, looked up once
	facts    policy.Facts
	traceIDs // the trace the log lines carry, and the SERVER span (trace.go)

	// What was decided (policy.Rules.Decide), under the rules this request
	// was decided by whatever reloads happen meanwhile.
	rules *policy.Rules
	out   policy.Outcome

	// The forward leg (forward.go).
	leg leg

	// The answer and its access line (finish.go).
	w        responseWriter // in the exchange: one allocation per request, not two
	pm       *pairMetrics   // the metric children of (caller, route), once both are settled
	code     string         // the error code, when the gateway answered itself
	shadow   string         // the shadow candidate's outcome, when it differs from the live one
	status   int            // the status answered, for the access line
	elapsed  time.Duration  // the time taken, for the access line
	logField [1]zap.Field   // the access line's one (inlined) field
}

// leg is the forward leg's scratch memory: the body on its way, the
// upstream exchange, the answer being relayed.
type leg struct {
	// The body (body.go, replay.go).
	body      requestBody
	reserved  int64         // body memory counted under server.resend_buffer_bytes, released in finish
	buffered  []byte        // the whole body, when it was read first (small, or checked by a sensitive route)
	memReader bytes.Reader  // reads buffered for the first attempt
	memBody   io.ReadCloser // memReader as the request body; nil when nothing was buffered
	replay    *replayBody   // the streamed body's copy for a resend, when kept

	// The upstream exchange (forward.go, deadline.go, send.go, transport.go).
	deadline       context.Context
	cancelDeadline context.CancelFunc // the deadline's own timer, when the exchange started late (forward.go)
	began          time.Time          // when the upstream leg's deadline began
	spent          time.Duration      // the exchange's time before it began (a body read, an earlier attempt)
	resend         io.ReadCloser      // the body of a request sent again after a vendor 429 (throttled.go)
	up             upstreamCtx        // deadline's base: see deadlines
	outURL         url.URL            // the outgoing request's URL
	guard          guardedBody        // the outgoing request's body, most often
	retryGuard     *guardedBody       // the guard of an unsent body's second attempt (transport.go, again)
	tok            *tokencache.Token  // the token sent upstream, once an attempt was made
	noToken        bool               // no valid token could be had for the request
	attempts       int                // upstream attempts made: a 401 resend and every retry count (the access line's attempts)
	template       string             // the route's path template, for the attempts' spans (sampled requests only)
	took           time.Duration      // from the first attempt to the last answer's head (faxgate_upstream_duration_seconds)
	upstreamStatus int
	whole          wholeBody // the upstream response body, when it is read whole
	traceState               // the 1xx relay's, and whether a connection was had
	trailers       bool      // the upstream's trailers were copied to the answer's header map
}

// token is the value of the token sent upstream, "" before an attempt.
func (l *leg) token() string {
	if l.tok == nil {
		return ""
	}
	return l.tok.Value.Reveal()
}
