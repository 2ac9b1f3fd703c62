package proxy

import (
	"net/http"

	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/route"
)

// What the gateway answers or checks itself, with no upstream in it: the
// auth shim, and policy.confirm on a body read whole.

// auth answers POST /v1/auth for a caller: it is never forwarded.
func (h *Handler) auth(w *responseWriter, r *http.Request, ex *exchange) *gatewayError {
	if !ex.rules.AuthShim {
		return errAuthManaged
	}
	if r.Method != http.MethodPost {
		return routeMethod(route.RouteAuth)
	}
	// The shim lets unmodified SDKs that insist on the auth dance work: they get
	// a placeholder, which the gateway strips like any caller credential.
	body := `{"status":1,"message":"Token generated successfully.","data":{"access_token":"faxgate-managed","token_type":"Bearer","expires_in":86400}}`
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(body))
	return nil
}

// confirm enforces policy.confirm on the buffered body
// (docs/callers-and-policy.md, Granting numbers.delete).
func (h *Handler) confirm(r *http.Request, ex *exchange) *gatewayError {
	var body []byte
	if ex.buffered != nil {
		body = ex.buffered
	} else if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		// Over the replay buffer: far larger than any delete body.
		return &gatewayError{http.StatusRequestEntityTooLarge, "body_too_large", "a confirmed route's body must be at most 1 MiB"}
	}
	confirm := ""
	if vs := r.Header.Values(policy.ConfirmHeader); len(vs) == 1 {
		confirm = vs[0]
	}
	num, order, perr := policy.CheckConfirm(ex.target.RawQuery, body, confirm)
	ex.numberID, ex.orderID = num, order
	if perr != nil {
		return policyRefusal(perr)
	}
	return nil
}
