package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/faxgate/faxgate/policy/route"
)

// envelope is the upstream's response shape plus the gateway's machine-readable
// error code (docs/callers-and-policy.md, What a denied caller sees).
type envelope struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error"`
}

// gatewayError is a refusal or failure answered by the gateway itself.
type gatewayError struct {
	status  int
	code    string
	message string
}

func (e *gatewayError) Error() string { return e.code + ": " + e.message }

// writeError answers with the gateway's JSON envelope. Messages are built by
// the gateway from fixed text and configured names only, never from request
// bytes, so they cannot reflect a credential or a path back.
func writeError(w http.ResponseWriter, e *gatewayError) {
	body, _ := json.Marshal(envelope{Status: 0, Message: e.message, Error: e.code})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}

var (
	errMethod = &gatewayError{http.StatusMethodNotAllowed, "method_not_allowed",
		"method not allowed: the gateway forwards GET, POST, PATCH, PUT and DELETE"}
	errFraming = &gatewayError{http.StatusBadRequest, "invalid_request",
		"ambiguous message framing: Transfer-Encoding must be chunked and must not come with Content-Length"}
	errHeadersTooLarge = &gatewayError{http.StatusRequestHeaderFieldsTooLarge, "headers_too_large",
		"request headers exceed 32 KiB"}
	errBodyTooLarge = &gatewayError{http.StatusRequestEntityTooLarge, "body_too_large",
		"request body exceeds server.max_body_bytes"}
	errBodyTimeout = &gatewayError{http.StatusRequestTimeout, "request_timeout",
		"request body arrived slower than the read timeout"}
	errBodyRead = &gatewayError{http.StatusBadRequest, "invalid_request",
		"request body could not be read"}
	errAuthManaged = &gatewayError{http.StatusForbidden, "auth_managed",
		"POST /v1/auth is managed by the gateway: call the API without credentials"}
	errTokenUnavailable = &gatewayError{http.StatusServiceUnavailable, "token_unavailable",
		"no valid upstream token is available"}
	errUpstreamUnavailable = &gatewayError{http.StatusBadGateway, "upstream_unavailable",
		"the upstream could not be reached"}
	errUpstreamTimeout = &gatewayError{http.StatusGatewayTimeout, "upstream_timeout",
		"the upstream did not answer within upstream.timeout"}
	errUnidentified = &gatewayError{http.StatusForbidden, "unidentified_caller",
		"caller not identified: no mTLS identity, trusted identity header or source address matched"}
	errNotForwardable = &gatewayError{http.StatusBadGateway, "upstream_unavailable",
		"the upstream switched protocols, which the gateway does not forward"}
	errVersion = &gatewayError{http.StatusHTTPVersionNotSupported, "http_version_not_supported",
		"HTTP version not supported: the gateway speaks HTTP/1.0 and HTTP/1.1 (and HTTP/2 over TLS)"}
	errRequestLine = &gatewayError{http.StatusBadRequest, "invalid_request",
		"malformed request line: want METHOD target HTTP/x.y"}
	errHeader = &gatewayError{http.StatusBadRequest, "invalid_request",
		"malformed request header: a field line without a colon, a name that is not a token, " +
			"a control byte in a value, a folded first line, or Host missing, repeated or malformed"}
	errContentLength = &gatewayError{http.StatusBadRequest, "invalid_request",
		"malformed request header: Content-Length must be one decimal number, repeated only identically"}
	errExpectation = &gatewayError{http.StatusExpectationFailed, "expectation_failed",
		"expectation failed: the only Expect the gateway meets is 100-continue"}
)

// policyRefusal is a refusal of package policy, answered as the gateway's own.
func policyRefusal(e *route.Error) *gatewayError {
	return &gatewayError{e.Status, e.Code, e.Message}
}

func forbidden(caller, route string) *gatewayError {
	return &gatewayError{http.StatusForbidden, "forbidden", "caller " + caller + " may not call " + route}
}

func rateLimited(caller string) *gatewayError {
	return &gatewayError{http.StatusTooManyRequests, codeRateLimited, "rate limit exceeded for caller " + caller}
}

func routeMethod(route string) *gatewayError {
	return &gatewayError{http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed for route " + route}
}
