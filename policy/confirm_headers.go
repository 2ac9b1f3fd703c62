package policy

import (
	"mime"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/policy/routetable"
)

// CheckConfirmHeaders enforces, on a route in policy.confirm, that the
// upstream reads the body as the JSON the gateway checked (docs/security.md):
// exactly one Content-Type, application/json; no Content-Encoding,
// since the gateway checks the raw bytes and an upstream that decompresses
// would read others; and no Connection header naming either, since the
// forward drops every header Connection names and the upstream would then
// get the checked body without its type. Header names are compared as
// FoldedHeaderName reads them, so an underscore spelling counts too. Every
// refusal is 400 invalid_request.
func CheckConfirmHeaders(h http.Header) *route.Error {
	var contentType []string
	for k, vs := range h {
		switch routetable.FoldedHeaderName(k) {
		case "Content-Type":
			contentType = append(contentType, vs...)
		case "Content-Encoding":
			return invalidRequest("a confirmed route's body must be sent without Content-Encoding")
		case "Connection":
			for _, v := range vs {
				for name := range strings.SplitSeq(v, ",") {
					switch routetable.FoldedHeaderName(textproto.TrimString(name)) {
					case "Content-Type", "Content-Encoding":
						return invalidRequest("a confirmed route's request may not name Content-Type or Content-Encoding in Connection")
					}
				}
			}
		}
	}
	if len(contentType) != 1 {
		return invalidRequest("a confirmed route's body must be sent with exactly one Content-Type: application/json")
	}
	if mt, _, err := mime.ParseMediaType(contentType[0]); err != nil || mt != "application/json" {
		return invalidRequest("a confirmed route's body must be sent as Content-Type: application/json")
	}
	return nil
}
