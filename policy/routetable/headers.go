package routetable

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
