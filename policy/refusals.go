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
