package proxy

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/tokencache"
)

// exchange is one request's state, shared by the handler's stages, the
// forward, and the transport, which finds it in the upstream request's
// context (exchangeFrom). It is allocated once per request, and holds what
// would otherwise be allocations of their own (the response writer, the
// upstream leg's context, the outgoing URL, the body readers).
type exchange struct {
	// The answer and its access line (ServeHTTP, finish, accesslog.go).
	w        responseWriter // in the exchange: one allocation per request, not two
	start    time.Time
	id       string
	idHeader []string
	method   string        // the method's metrics label (metrics.Method)
	code     string        // the error code, when the gateway answered itself
	status   int           // the status answered, for the access line
	elapsed  time.Duration // the time taken, for the access line
	waited   time.Duration // the time waited for the upstream budget (budget.go), for the access line
	logField [1]zap.Field  // the access line's one (inlined) field
	traceIDs               // the trace the log lines carry, and the SERVER span (trace.go)

	// Identify and route (serve).
	rules  *policy.Rules // the rules this request was decided by, whatever reloads happen meanwhile
	caller string
	route  string
	target route.Target
	// auditRoute is the sensitive route the path resolves to, whatever the
	// method and whoever the caller: "" when no audit line is due.
	auditRoute string
	// auditIDs: the audit line carries number_id and order_id.
	auditIDs bool

	// Policy (serve).
	decision policy.Decision

	// Body (body.go).
	body      requestBody
	buffered  []byte        // the whole body, when it was read first (small, or checked by a sensitive route)
	reserved  int64         // body memory counted under server.resend_buffer_bytes, released in finish
	memReader bytes.Reader  // reads buffered for the first attempt
	memBody   io.ReadCloser // memReader as the request body; nil when nothing was buffered
	replay    *replayBody   // the streamed body's copy for a resend, when kept

	// Confirm and audit: the IDs of the audit line (local.go, audit.go).
	numberID string
	orderID  string

	// Forward: the upstream leg (forward.go, deadline.go, transport.go).
	pm             *pairMetrics // the metric children of (caller, route), once both are settled
	deadline       context.Context
	up             upstreamCtx       // deadline's base: see deadlines
	outURL         url.URL           // the outgoing request's URL
	guard          guardedBody       // the outgoing request's body, most often
	tok            *tokencache.Token // the token sent upstream, once the transport ran
	fail           *gatewayError     // set by the transport when it fails the exchange itself
	upstreamStatus int
	whole          wholeBody // the upstream response body, when it is read whole
	traceState               // the 1xx relay's
	trailers       bool      // the upstream's trailers were copied to the answer's header map
}

type exchangeKey struct{}

func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}
