package proxy

import "net/http"

// authShimBody is the shim's answer to POST /v1/auth
// (policy.auth_endpoint: shim): a placeholder token, which the gateway
// strips from the caller's later requests like any caller credential.
const authShimBody = `{"status":1,"message":"Token generated successfully.","data":{"access_token":"faxgate-managed","token_type":"Bearer","expires_in":86400}}`

// auth answers POST /v1/auth for a caller with the shim, so that unmodified
// SDKs that insist on the auth dance work; it is never forwarded.
func (h *Handler) auth(w *responseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(authShimBody))
}
