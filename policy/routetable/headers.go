package routetable

import (
	"net/textproto"
	"strings"
)

// ConfirmHeader is the request header in which a caller echoes the body's
// number_id for a route in policy.confirm. The gateway consumes it, so it
// is never forwarded and cannot be callers.identity_header.
const ConfirmHeader = "X-Faxgate-Confirm"

// StrippedRequestPrefix starts the canonical name of every request header
// the gateway strips besides StrippedRequestHeaders: X-Forwarded-For and
// its kin are forwarding claims a caller could forge.
const StrippedRequestPrefix = "X-Forwarded-"

// strippedRequestHeaders: see StrippedRequestHeaders.
var strippedRequestHeaders = [...]string{
	"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key",
	"Api-Key", "X-Auth-Token", "X-Access-Token",
	"Forwarded", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip",
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
	"X-Original-Url", "X-Rewrite-Url", "X-Override-Url", "X-Original-Uri", "X-Envoy-Original-Path",
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Upgrade", "Te", "Trailer",
	"Transfer-Encoding", "Http2-Settings",
	"X-Forwarded-Client-Cert", ConfirmHeader,
}

// StrippedRequestHeaders returns the canonical names of the request
// headers that never reach the upstream (docs/security.md, Nothing
// forgeable passes): caller credentials, forwarding claims a caller could
// forge, method and URL overrides that would make the upstream act on
// another route than the one policy checked, hop-by-hop headers, and the
// gateway's own control headers. Every header whose name starts with
// StrippedRequestPrefix, and every header named in Connection, is dropped
// too. Each call returns a new slice.
func StrippedRequestHeaders() []string {
	return append([]string(nil), strippedRequestHeaders[:]...)
}

// FoldedHeaderName is the name a header named k is read under by the
// most lenient server behind the gateway: its canonical form with every
// underscore read as a hyphen. CGI-style servers (PHP, Rack, WSGI and the
// frameworks on top of them) read "X_Faxgate_Caller" and "x-faxgate-caller"
// as one variable, HTTP_X_FAXGATE_CALLER, so every spelling of a header the
// gateway strips or checks is that header. The identity header's configured
// spelling is compiled once into this form (Rules.IdentityHeader), and the
// forward folds a request's names the same way.
func FoldedHeaderName(k string) string {
	if strings.IndexByte(k, '_') >= 0 {
		k = strings.ReplaceAll(k, "_", "-")
	}
	return textproto.CanonicalMIMEHeaderKey(k)
}
