package proxy

import (
	"net/http"
	"net/textproto"
	"strings"

	"github.com/faxgate/faxgate/policy/routetable"
)

// strippedRequestHeaders never reach the upstream (docs/security.md, Nothing
// forgeable passes):
// caller credentials, forwarding claims a caller could forge, method and URL
// overrides that would make the upstream act on another route than the one
// policy checked, hop-by-hop headers, and the gateway's own control headers.
// Every header named in Connection is dropped too (outgoingHeader).
var strippedRequestHeaders = routetable.StrippedRequestHeaders()

// strippedRequestName reports whether a request header named k is not
// forwarded; identity is the identity header as Rules.IdentityHeader holds
// it (canonical, underscores as hyphens), so that no spelling of it, in the
// config or in the request, reaches the upstream.
func strippedRequestName(k, identity string) bool {
	if strippedRequestHeader[k] || k == identity || strings.HasPrefix(k, routetable.StrippedRequestPrefix) {
		return true
	}
	// CGI-style servers (PHP, Rack, WSGI, many frameworks on top of them)
	// read "X_Http_Method_Override" and "X-Http-Method-Override" as one
	// variable, HTTP_X_HTTP_METHOD_OVERRIDE: an underscore spelling of a
	// stripped header is that header. net/http canonicalises the names it
	// reads, so k is canonical but for its underscores.
	if strings.IndexByte(k, '_') >= 0 {
		d := routetable.FoldedHeaderName(k)
		return strippedRequestHeader[d] || d == identity || strings.HasPrefix(d, routetable.StrippedRequestPrefix)
	}
	return false
}

// strippedRequestHeader is strippedRequestHeaders as a set.
var strippedRequestHeader = func() map[string]bool {
	m := make(map[string]bool, len(strippedRequestHeaders))
	for _, k := range strippedRequestHeaders {
		m[k] = true
	}
	return m
}()

// containsFold reports whether s holds token in any letter case: a header
// name is canonicalized, which changes the case of a token written into it.
// Header names are short, so the search rarely starts.
func containsFold(s, token string) bool {
	for i := 0; i+len(token) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(token)], token) {
			return true
		}
	}
	return false
}

// headerBytes estimates the request head's size as on the wire.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len(r.Host) + 8
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// validRequestID accepts the X-Request-Id values the gateway keeps
// (docs/callers-and-policy.md).
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// outgoingHeader is the header sent upstream: the caller's, minus what
// the gateway never forwards (strippedRequestHeaders, the identity header,
// X-Forwarded-*, their underscore spellings) and minus every header the
// caller's Connection names; plus X-Request-Id, and an empty User-Agent
// when the caller sent none, so that Go's is not sent. Values are shared
// with the caller's header, which is not changed afterwards.
func outgoingHeader(in http.Header, identity string, requestID []string) http.Header {
	var named map[string]bool
	for _, f := range in["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				if named == nil {
					named = make(map[string]bool)
				}
				named[http.CanonicalHeaderKey(sf)] = true
			}
		}
	}
	out := make(http.Header, len(in)+1)
	for k, vs := range in {
		if strippedRequestName(k, identity) || named[k] {
			continue
		}
		out[k] = vs
	}
	out["X-Request-Id"] = requestID
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = noUserAgent
	}
	return out
}

// noUserAgent is the User-Agent value that makes net/http send none. It is
// shared, and never written.
var noUserAgent = []string{""}
