package policy

import (
	"net/http"

	"github.com/faxgate/faxgate/policy/route"
)

// The refusals of the confirmation rule (docs/callers-and-policy.md), in the
// error type every stage of the request path answers with.

func invalidRequest(msg string) *route.Error {
	return &route.Error{Status: http.StatusBadRequest, Code: route.CodeInvalidRequest, Message: msg}
}

func confirmationRequired(msg string) *route.Error {
	return &route.Error{Status: http.StatusPreconditionRequired, Code: route.CodeConfirmationRequired, Message: msg}
}

// The refusals of the decision pipeline (pipeline.go), with the messages
// callers see (docs/callers-and-policy.md, What a denied caller sees).
// Messages are built from fixed text and configured names only, never from
// request bytes.
var (
	errUnidentified = &route.Error{Status: http.StatusForbidden, Code: route.CodeUnidentifiedCaller,
		Message: "caller not identified: no mTLS identity, trusted identity header or source address matched"}
	errAuthManaged = &route.Error{Status: http.StatusForbidden, Code: route.CodeAuthManaged,
		Message: "POST /v1/auth is managed by the gateway: call the API without credentials"}
	// errBodyTooLarge ends the connection: the body is left unread.
	errBodyTooLarge = &route.Error{Status: http.StatusRequestEntityTooLarge, Code: route.CodeBodyTooLarge,
		Message: "request body exceeds server.max_body_bytes", Close: true}
	errConfirmBodyTooLarge = &route.Error{Status: http.StatusRequestEntityTooLarge, Code: route.CodeBodyTooLarge,
		Message: "a confirmed route's body must be at most 1 MiB"}
	// errClientClosed is the log's word for a caller that went away while
	// its request waited: nobody reads an answer (status 499).
	errClientClosed = &route.Error{Status: StatusClientClosed, Code: route.CodeClientClosed}
)

// StatusClientClosed is the status the access line gives a request whose
// caller went away before its answer (nginx's 499); nothing is sent.
const StatusClientClosed = 499

// ErrBodyTooLarge is the refusal of a body over server.max_body_bytes, for
// the request path, which finds some of them only while it reads.
var ErrBodyTooLarge = errBodyTooLarge

// ErrClientClosed is the outcome of a request whose caller went away.
var ErrClientClosed = errClientClosed
