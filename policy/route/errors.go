// Package route resolves a request-target to exactly one route
// (docs/callers-and-policy.md): the built-in and configured routes, the
// strict path rules (an ambiguous target is refused, never cleaned), and the
// paths below a sensitive route or below /v1/auth that no caller reaches.
// The path it resolves is the path the gateway forwards.
package route

import "net/http"

// Error is a refusal made by the gateway. The proxy answers it in the
// upstream's JSON envelope, as docs/callers-and-policy.md shows:
// {"status":0,"message":Message,"error":Code}.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is an error code of docs/callers-and-policy.md's table
	// (invalid_path, unknown_route ...): callers branch on it.
	Code string
	// Message is safe to show the caller and to log: it never echoes the
	// raw path, query, body or header values, which may hold secrets or IDs.
	Message string
	// Close ends the connection after the answer: what follows on it
	// (a body left unread, a head whose framing is in doubt) cannot be
	// read as the next request.
	Close bool
}

// Error implements error.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// The error codes (docs/callers-and-policy.md) that this package produces or
// that the proxy produces from a Decision.
const (
	CodeInvalidPath          = "invalid_path"
	CodeInvalidRequest       = "invalid_request"
	CodeUnknownRoute         = "unknown_route"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeForbidden            = "forbidden"
	CodeAuthManaged          = "auth_managed"
	CodeUnidentifiedCaller   = "unidentified_caller"
	CodeConfirmationRequired = "confirmation_required"
	CodeRateLimited          = "rate_limited"
	CodeBodyTooLarge         = "body_too_large"
	CodeUpstreamThrottled    = "upstream_throttled"
	CodeBudgetExhausted      = "upstream_budget_exhausted"
	CodeClientClosed         = "client_closed"
)

func invalidPath(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidPath, Message: msg}
}

func invalidRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: msg}
}

func unknownRoute(msg string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeUnknownRoute, Message: msg}
}

func authManaged(msg string) *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeAuthManaged, Message: msg}
}
