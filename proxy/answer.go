package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/route"
)

// envelope is the upstream's response shape plus the gateway's machine-readable
// error code (docs/callers-and-policy.md, What a denied caller sees).
type envelope struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error"`
}

// answer is the one way a refusal reaches the caller, whichever stage made
// it: it counts the denial, then writes the envelope with what the refusal
// reports (Retry-After for a hold or the budget; the connection's end when
// what follows on it cannot be trusted). A caller that went away is only
// logged, as 499: nothing is counted or sent. After an answer's head has
// gone out, nothing more is written.
func (h *Handler) answer(w *responseWriter, ex *exchange, ref *route.Error) {
	ex.code = ref.Code
	if ref.Code == route.CodeClientClosed {
		w.status = policy.StatusClientClosed
		return
	}
	m := h.opts.Metrics
	m.Denied.WithLabelValues(ex.out.Caller, ex.out.Route, ref.Code).Inc()
	if ref.Code == route.CodeRateLimited {
		m.RateLimited.WithLabelValues(ex.out.Caller).Inc()
	}
	if w.wroteHeader {
		return
	}
	hdr := w.Header()
	if ref.Close {
		hdr.Set("Connection", "close")
	}
	if ref.Code == route.CodeUpstreamThrottled || ref.Code == route.CodeBudgetExhausted {
		hdr["Retry-After"] = []string{ascii.Itoa(max(1, ceilSeconds(ex.out.RetryAfter)))}
	}
	writeError(w, ref)
}

// writeError answers with the gateway's JSON envelope. Messages are built by
// the gateway from fixed text and configured names only, never from request
// bytes, so they cannot reflect a credential or a path back.
func writeError(w http.ResponseWriter, e *route.Error) {
	body, _ := json.Marshal(envelope{Status: 0, Message: e.Message, Error: e.Code})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}

// What the head alone earns (precheck.go), and what reading the body can
// end in (body.go). All but errMethod end the connection: the head's
// framing or size is in doubt, or a body is left unread.
var (
	errMethod = &route.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
		Message: "method not allowed: the gateway forwards GET, POST, PATCH, PUT and DELETE"}
	errFraming = &route.Error{Status: http.StatusBadRequest, Code: "invalid_request",
		Message: "ambiguous message framing: Transfer-Encoding must be chunked and must not come with Content-Length", Close: true}
	errHeadersTooLarge = &route.Error{Status: http.StatusRequestHeaderFieldsTooLarge, Code: "headers_too_large",
		Message: "request headers exceed 32 KiB", Close: true}
	errBodyTooLarge = policy.ErrBodyTooLarge
	errBodyTimeout  = &route.Error{Status: http.StatusRequestTimeout, Code: "request_timeout",
		Message: "request body arrived slower than the read timeout", Close: true}
	errBodyRead = &route.Error{Status: http.StatusBadRequest, Code: "invalid_request",
		Message: "request body could not be read", Close: true}
	errVersion = &route.Error{Status: http.StatusHTTPVersionNotSupported, Code: "http_version_not_supported",
		Message: "HTTP version not supported: the gateway speaks HTTP/1.0 and HTTP/1.1 (and HTTP/2 over TLS)", Close: true}
	errRequestLine = &route.Error{Status: http.StatusBadRequest, Code: "invalid_request",
		Message: "malformed request line: want METHOD target HTTP/x.y", Close: true}
	errHeader = &route.Error{Status: http.StatusBadRequest, Code: "invalid_request",
		Message: "malformed request header: a field line without a colon, a name that is not a token, " +
			"a control byte in a value, a folded first line, or Host missing, repeated or malformed", Close: true}
	errContentLength = &route.Error{Status: http.StatusBadRequest, Code: "invalid_request",
		Message: "malformed request header: Content-Length must be one decimal number, repeated only identically", Close: true}
	errExpectation = &route.Error{Status: http.StatusExpectationFailed, Code: "expectation_failed",
		Message: "expectation failed: the only Expect the gateway meets is 100-continue", Close: true}
)
