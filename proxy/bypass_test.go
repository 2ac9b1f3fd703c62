package proxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// The bypass corpus (issue 4): raw requests, sent over TCP to the real
// listener, that try to make the upstream act on POST /v1/numbers/delete or
// POST /v1/auth without permission. Each case writes down the reply it
// expects and then checks what faxsim recorded: whatever the gateway
// answered, no request reached the upstream that the upstream could read as
// one of those two calls. One control case per gateway shows that the check
// does see a delete when one is really forwarded.

// untrustedCallers: loopback is no trusted proxy, so every identity header
// the test sends must be ignored; every loopback peer is "svc", which "*"
// grants everything but the sensitive numbers.delete. "ops" may delete, but
// only from 127.0.0.2 (the control case dials from there) or through a
// trusted proxy, which no test peer is.
const untrustedCallers = `
callers:
  trusted_proxies: ["10.255.0.0/16"]
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
    - name: ops
      cidrs: ["127.0.0.2/32"]
      header_values: ["ops"]
      spiffe_ids: ["spiffe://faxgate.test/ops"]
      allow: ["*", "numbers.delete"]
rate_limit:
  default: { rps: 10000, burst: 10000 }
policy:
  auth_endpoint: deny
`

// trustedCallers: loopback is a trusted proxy, so X-Faxgate-Caller: ops and
// an X-Forwarded-Client-Cert naming ops's SPIFFE ID are believed; the
// attacks are on how exactly that header must be spelled and on the
// confirmation rule. The auth shim is on: it must reply locally.
const trustedCallers = `
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
    - name: ops
      header_values: ["ops"]
      spiffe_ids: ["spiffe://faxgate.test/ops"]
      allow: ["*", "numbers.delete"]
rate_limit:
  default: { rps: 10000, burst: 10000 }
policy:
  auth_endpoint: shim
`

const (
	deleteBody = `{"number_id":"num_1001","order_id":"ord_5001"}`
	authBody   = `{"api_secret_key":"guess"}`
	// smuggledDelete is a complete confirmed delete, to hide inside another
	// request's body.
	smuggledDelete = "POST /v1/numbers/delete HTTP/1.1\r\nHost: faxgate.test\r\nX-Faxgate-Caller: ops\r\n" +
		"X-Faxgate-Confirm: num_1001\r\nContent-Type: application/json\r\nContent-Length: 46\r\n\r\n" + deleteBody
	smuggledAuth = "POST /v1/auth HTTP/1.1\r\nHost: faxgate.test\r\nContent-Type: application/json\r\nContent-Length: 26\r\n\r\n" + authBody
	// rawTimeout bounds one exchange. Every case's connection must be closed
	// by the server well before it: the cases ask for Connection: close, or
	// expect the server to close after refusing the framing.
	rawTimeout = 5 * time.Second
)

// reply is one response the case expects, in order.
type reply struct {
	status int
	// from says who must have written it.
	from replyFrom
	// code is the gateway's machine-readable error (from == byGateway).
	code string
}

type replyFrom int

const (
	byGateway  replyFrom = iota // the gateway's JSON envelope with an error code
	byUpstream                  // relayed from faxsim: no gateway error code
	byShim                      // the auth shim's local placeholder token
	byGoServer                  // net/http's own plain-text refusal, before any handler
)

func gw(status int, code string) reply { return reply{status, byGateway, code} }

var (
	badLine    = []reply{gw(400, "invalid_request")}
	badVersion = []reply{gw(505, "http_version_not_supported")}
	tooLarge   = []reply{gw(431, "headers_too_large")}
)

// exactHead pads the head of the request raw with an X-Pad field so that
// the head, up to and including its empty line, is exactly n bytes.
func exactHead(raw string, n int) string {
	head, body, _ := strings.Cut(raw, "\r\n\r\n")
	pad := n - len(head) - len("\r\nX-Pad: ") - len("\r\n\r\n")
	return head + "\r\nX-Pad: " + strings.Repeat("p", pad) + "\r\n\r\n" + body
}
func relayed(status int) reply  { return reply{status: status, from: byUpstream} }
func goServer(status int) reply { return reply{status: status, from: byGoServer} }

var shim = reply{status: 200, from: byShim}

// attack is one case of the corpus.
type attack struct {
	name string
	raw  string
	want []reply
	// forward is the one path the upstream must receive (a harmless route,
	// or the delete for the control case); "" means nothing may reach it.
	forward string
	// control marks the granted, confirmed delete that must reach the upstream.
	control bool
	// from, when set, is the local address to dial from instead of g.Raw's.
	from string
}

// noClose, as an extra line of send, leaves out Connection: close and is not
// sent itself: the server must then close the connection on its own (or
// keep it for a pipelined request that asks for the close).
const noClose = "Connection:"

// send builds a complete request: request line, Host, Connection: close and,
// with a body, Content-Type: application/json and Content-Length, then
// extra. A default is left out when extra has a field of that name (ASCII
// case ignored), so a case can replace or repeat it.
func send(method, target, body string, extra ...string) string {
	has := func(name string) bool {
		for _, e := range extra {
			if n, _, ok := strings.Cut(e, ":"); ok && strings.EqualFold(n, name) {
				return true
			}
		}
		return false
	}
	lines := []string{method + " " + target + " HTTP/1.1"}
	if !has("Host") {
		lines = append(lines, "Host: faxgate.test")
	}
	if !has("Connection") {
		lines = append(lines, "Connection: close")
	}
	if body != "" && !has("Content-Type") {
		lines = append(lines, "Content-Type: application/json")
	}
	if body != "" && !has("Content-Length") && !has("Transfer-Encoding") {
		lines = append(lines, "Content-Length: "+strconv.Itoa(len(body)))
	}
	for _, e := range extra {
		if e != noClose {
			lines = append(lines, e)
		}
	}
	return strings.Join(lines, "\r\n") + "\r\n\r\n" + body
}

func post(target, body string, extra ...string) string { return send("POST", target, body, extra...) }

// deleteAs is a delete of num_1001 by ops (believed only from a trusted
// peer), confirmed unless extra says otherwise.
func deleteAs(target string, extra ...string) string {
	return post(target, deleteBody, append([]string{"X-Faxgate-Caller: ops", "X-Faxgate-Confirm: num_1001"}, extra...)...)
}

// opsDelete is a delete by ops with the given body and header lines; the
// confirmation, if any, is in extra.
func opsDelete(body string, extra ...string) string {
	return post("/v1/numbers/delete", body, append([]string{"X-Faxgate-Caller: ops"}, extra...)...)
}

// chunked frames body as one chunk plus the terminating chunk.
func chunked(body string) string {
	return strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
}

// withTrailer frames body as one chunk and ends the message with a trailer
// section holding the field line trailer.
func withTrailer(body, trailer string) string {
	return strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n" + trailer + "\r\n\r\n"
}

// untrustedAttacks run against the gateway that believes no identity header.
func untrustedAttacks() []attack {
	forbidden := []reply{gw(403, "forbidden")}
	badPath := []reply{gw(400, "invalid_path")}
	managed := []reply{gw(403, "auth_managed")}
	ok := []reply{relayed(200)}
	const list = "/v1/contacts/list"
	return append([]attack{
		{name: "control: ops by address, granted and confirmed", from: "127.0.0.2",
			raw:  post("/v1/numbers/delete", `{"number_id":"num_1003","order_id":"ord_5003"}`, "X-Faxgate-Confirm: num_1003"),
			want: ok, forward: "/v1/numbers/delete", control: true},

		// Percent-encoding: the upstream (or a proxy after the gateway) may
		// decode it once or twice; the gateway never forwards a %.
		{name: "%2F between segments", raw: post("/v1/numbers%2Fdelete", deleteBody), want: badPath},
		{name: "%2f between segments", raw: post("/v1/numbers%2fdelete", deleteBody), want: badPath},
		{name: "every slash encoded", raw: post("/v1%2Fnumbers%2Fdelete", deleteBody), want: badPath},
		// Not a path at all once its first slash is encoded: Go refuses it.
		{name: "first slash encoded", raw: post("%2Fv1/numbers/delete", deleteBody), want: []reply{goServer(400)}},
		{name: "%2e%2e dot segment", raw: post("/v1/contacts/%2e%2e/numbers/delete", deleteBody), want: badPath},
		{name: "%2E%2E dot segment", raw: post("/v1/contacts/%2E%2E/numbers/delete", deleteBody), want: badPath},
		{name: "%2e single dot", raw: post("/v1/%2e/numbers/delete", deleteBody), want: badPath},
		{name: "%252F double-encoded slash", raw: post("/v1/numbers%252Fdelete", deleteBody), want: badPath},
		{name: "%252e%252e double-encoded dots", raw: post("/v1/contacts/%252e%252e/numbers/delete", deleteBody), want: badPath},
		{name: "encoded letter", raw: post("/v1/numbers/d%65lete", deleteBody), want: badPath},
		{name: "overlong UTF-8 slash %c0%af", raw: post("/v1/numbers%c0%afdelete", deleteBody), want: badPath},
		{name: "%u002f IIS encoding", raw: post("/v1/numbers%u002fdelete", deleteBody), want: []reply{goServer(400)}},
		{name: "%00 after the path", raw: post("/v1/numbers/delete%00", deleteBody), want: badPath},
		{name: "%20 after the path", raw: post("/v1/numbers/delete%20", deleteBody), want: badPath},
		{name: "%09 after the path", raw: post("/v1/numbers/delete%09", deleteBody), want: badPath},
		{name: "%3F encoded query mark", raw: post("/v1/numbers/delete%3Fx=1", deleteBody), want: badPath},

		// Dot segments.
		{name: "dot-dot", raw: post("/v1/contacts/../numbers/delete", deleteBody), want: badPath},
		{name: "dot", raw: post("/v1/./numbers/delete", deleteBody), want: badPath},
		{name: "trailing /.", raw: post("/v1/numbers/delete/.", deleteBody), want: badPath},
		{name: "trailing /x/..", raw: post("/v1/numbers/delete/x/..", deleteBody), want: badPath},
		{name: "dot-dot above the root", raw: post("/../v1/numbers/delete", deleteBody), want: badPath},
		{name: "three dots", raw: post("/v1/numbers/.../delete", deleteBody), want: badPath},

		// Backslashes, which Windows stacks and some proxies read as /.
		{name: "backslashes", raw: post(`/v1\numbers\delete`, deleteBody), want: badPath},
		{name: "%5C", raw: post("/v1/numbers%5Cdelete", deleteBody), want: badPath},
		{name: "backslash dot-dot", raw: post(`/v1/contacts\..\numbers\delete`, deleteBody), want: badPath},

		// Empty segments.
		{name: "leading //", raw: post("//v1/numbers/delete", deleteBody), want: badPath},
		{name: "// inside", raw: post("/v1//numbers/delete", deleteBody), want: badPath},
		{name: "// before the last segment", raw: post("/v1/numbers//delete", deleteBody), want: badPath},
		{name: "two trailing slashes", raw: post("/v1/numbers/delete//", deleteBody), want: badPath},

		// ; parameters, which servlet containers strip.
		{name: ";jsessionid", raw: post("/v1/numbers/delete;jsessionid=x", deleteBody), want: badPath},
		{name: "; in a middle segment", raw: post("/v1/numbers;x=1/delete", deleteBody), want: badPath},
		{name: "bare ; in the last segment", raw: post("/v1/numbers/delete;", deleteBody), want: badPath},

		// Suffixes, bytes and lookalikes.
		{name: ".json suffix", raw: post("/v1/numbers/delete.json", deleteBody), want: badPath},
		{name: "fragment", raw: post("/v1/numbers/delete#x", deleteBody), want: badPath},
		{name: "fragment hiding dot-dots", raw: post(list+"#/../../numbers/delete", deleteBody), want: badPath},
		{name: "raw tab in the target", raw: post("/v1/numbers/delete\t", deleteBody), want: []reply{goServer(400)}},
		{name: "raw NUL in the target", raw: post("/v1/numbers/delete\x00", deleteBody), want: []reply{goServer(400)}},
		// A request line that is not METHOD target HTTP/x.y is answered when
		// the line ends (docs/security.md).
		{name: "space inside the target", raw: post("/v1/numbers/ delete", deleteBody), want: badLine},
		{name: "two spaces before the version", raw: post("/v1/numbers/delete ", deleteBody), want: badLine},
		{name: "cyrillic e lookalike", raw: post("/v1/numbers/d\u0435lete", deleteBody), want: badPath},
		{name: "fullwidth solidus", raw: post("/v1/numbers\uff0fdelete", deleteBody), want: badPath},
		{name: "fullwidth letters", raw: post("/v1/\uff4e\uff55\uff4d\uff42\uff45\uff52\uff53/delete", deleteBody), want: badPath},
		{name: "division slash", raw: post("/v1/numbers\u2215delete", deleteBody), want: badPath},
		{name: "invalid UTF-8 byte", raw: post("/v1/numbers/delete\xff", deleteBody), want: badPath},

		// Case and one trailing slash resolve to the route; policy then denies it.
		{name: "upper case", raw: post("/V1/NUMBERS/DELETE", deleteBody), want: forbidden},

		// Unmatched paths below the sensitive route's path are refused, for
		// every caller (ops from its own address included).
		{name: "below the delete path", raw: post("/v1/numbers/delete/x", deleteBody), want: forbidden},
		{name: "below the delete path, case and depth", raw: post("/V1/numbers/DELETE/x/y", deleteBody), want: forbidden},
		{name: "below the delete path, trailing slash", raw: send("GET", "/v1/numbers/delete/x/", ""), want: forbidden},
		{name: "below the delete path as the granted caller", from: "127.0.0.2",
			raw: post("/v1/numbers/delete/num_1003", `{"number_id":"num_1003"}`, "X-Faxgate-Confirm: num_1003"), want: forbidden},
		{name: "beside the delete path is unmatched", raw: post("/v1/numbers/deletex", `{}`), want: []reply{relayed(404)}, forward: "/v1/numbers/deletex"},
		{name: "mixed case and trailing slash", raw: post("/v1/Numbers/Delete/", deleteBody), want: forbidden},
		{name: "trailing slash", raw: post("/v1/numbers/delete/", deleteBody), want: forbidden},
		{name: "empty query", raw: post("/v1/numbers/delete?", deleteBody), want: forbidden},

		// Other request-target forms.
		{name: "absolute-form", raw: post("http://faxgate.test/v1/numbers/delete", deleteBody), want: badPath},
		{name: "absolute-form with userinfo", raw: post("http://ops:pw@faxgate.test/v1/numbers/delete", deleteBody), want: badPath},
		{name: "absolute-form https", raw: post("https://127.0.0.1/v1/numbers/delete", deleteBody), want: badPath},
		{name: "authority-form with POST", raw: post("faxgate.test:80", deleteBody), want: badPath},
		{name: "CONNECT authority-form", raw: send("CONNECT", "127.0.0.1:80", ""), want: []reply{gw(405, "method_not_allowed")}},
		{name: "CONNECT with the delete path", raw: send("CONNECT", "/v1/numbers/delete", deleteBody), want: []reply{gw(405, "method_not_allowed")}},
		{name: "OPTIONS asterisk-form", raw: send("OPTIONS", "*", ""), want: []reply{gw(405, "method_not_allowed")}},
		{name: "POST asterisk-form", raw: post("*", deleteBody), want: badPath},

		// Sensitivity follows the path, whatever the method.
		{name: "GET with a body", raw: send("GET", "/v1/numbers/delete", deleteBody), want: forbidden},
		{name: "DELETE", raw: send("DELETE", "/v1/numbers/delete", deleteBody), want: forbidden},
		{name: "PATCH", raw: send("PATCH", "/v1/numbers/delete", deleteBody), want: forbidden},
		{name: "PUT", raw: send("PUT", "/v1/numbers/delete", deleteBody), want: forbidden},
		{name: "lower-case post", raw: send("post", "/v1/numbers/delete", deleteBody), want: []reply{gw(405, "method_not_allowed")}},
		{name: "OPTIONS", raw: send("OPTIONS", "/v1/numbers/delete", ""), want: []reply{gw(405, "method_not_allowed")}},

		// Method overrides are stripped on allowed routes and cannot lift
		// the delete's policy.
		{name: "X-HTTP-Method-Override on GET of the delete", raw: send("GET", "/v1/numbers/delete", "", "X-HTTP-Method-Override: POST"), want: forbidden},
		{name: "X-HTTP-Method-Override on an allowed path", raw: post(list, `{}`, "X-HTTP-Method-Override: DELETE"), want: ok, forward: list},
		{name: "X-HTTP-Method on an allowed path", raw: post(list, `{}`, "X-HTTP-Method: DELETE"), want: ok, forward: list},
		{name: "X-Method-Override on an allowed path", raw: post(list, `{}`, "X-Method-Override: DELETE"), want: ok, forward: list},
		{name: "_method query", raw: send("GET", "/v1/esign_templates?_method=POST", ""), want: []reply{gw(400, "invalid_request")}},
		{name: "encoded _method query", raw: post(list+"?%5Fmethod=POST", `{}`), want: []reply{gw(400, "invalid_request")}},
		{name: "_METHOD after ;", raw: post(list+"?a=1;_METHOD=POST", `{}`), want: []reply{gw(400, "invalid_request")}},

		// URL rewrite headers, plain and as hop-by-hop.
		{name: "X-Original-URL", raw: post(list, `{}`, "X-Original-URL: /v1/numbers/delete"), want: ok, forward: list},
		{name: "X-Rewrite-URL", raw: post(list, `{}`, "X-Rewrite-URL: /v1/numbers/delete"), want: ok, forward: list},
		{name: "X-Override-URL", raw: post(list, `{}`, "X-Override-URL: /v1/numbers/delete"), want: ok, forward: list},
		{name: "caller credentials in Api-Key, X-Auth-Token, X-Access-Token", raw: post(list, `{}`, "Api-Key: caller-key",
			"X-Auth-Token: caller-token", "X-Access-Token: caller-token", "X-Api-Key: caller-key"), want: ok, forward: list},
		{name: "X-Original-URL to auth", raw: post(list, `{}`, "X-Original-URL: /v1/auth"), want: ok, forward: list},
		{name: "X-Forwarded-Uri and -Prefix", raw: post(list, `{}`, "X-Forwarded-Uri: /v1/numbers/delete", "X-Forwarded-Prefix: /v1/numbers/delete"), want: ok, forward: list},
		{name: "X-Original-URL named in Connection", raw: post(list, `{}`, "Connection: close, X-Original-URL", "X-Original-URL: /v1/numbers/delete"), want: ok, forward: list},
		// Naming Authorization as hop-by-hop must not strip the gateway's
		// own token: faxsim would reply 401.
		{name: "Authorization named in Connection", raw: post(list, `{}`, "Connection: close, Authorization", "Authorization: Bearer x"), want: ok, forward: list},
		{name: "X-Original-URL in a trailer", raw: post(list, "", "Transfer-Encoding: chunked", "Content-Type: application/json", "Trailer: X-Original-URL") +
			withTrailer(`{}`, "X-Original-URL: /v1/numbers/delete"), want: ok, forward: list},
		{name: "obs-folded X-Original-URL", raw: post(list, `{}`, "X-Original-URL:", " /v1/numbers/delete"), want: ok, forward: list},

		// Host tricks.
		{name: "two Host headers", raw: post(list, `{}`, "Host: faxgate.test", "Host: 127.0.0.1"), want: badLine},
		{name: "Host with a path", raw: post(list, `{}`, "Host: faxgate.test/v1/numbers/delete"), want: badLine},
		{name: "absolute-form and Host disagree", raw: post("http://evil.test/v1/contacts/list", `{}`), want: badPath},

		// Identity headers from a peer outside trusted_proxies are ignored;
		// so are forwarding claims naming ops's address.
		{name: "identity header from an untrusted peer", raw: deleteAs("/v1/numbers/delete"), want: forbidden},
		{name: "obs-folded identity header from an untrusted peer", raw: post("/v1/numbers/delete", deleteBody, "X-Faxgate-Caller:", " ops", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "XFCC from an untrusted peer", raw: post("/v1/numbers/delete", deleteBody,
			"X-Forwarded-Client-Cert: By=spiffe://faxgate.test/gw;URI=spiffe://faxgate.test/ops", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "X-Forwarded-For ops's address", raw: post("/v1/numbers/delete", deleteBody, "X-Forwarded-For: 127.0.0.2", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "X-Real-IP ops's address", raw: post("/v1/numbers/delete", deleteBody, "X-Real-IP: 127.0.0.2", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "Forwarded for ops's address", raw: post("/v1/numbers/delete", deleteBody, "Forwarded: for=127.0.0.2", "X-Faxgate-Confirm: num_1001"), want: forbidden},

		// Message framing: a refused framing is answered 400 and the
		// connection closed (none of these asks for Connection: close).
		{name: "CL and TE smuggling a delete", raw: post(list, "0\r\n\r\n"+smuggledDelete, noClose, "Content-Length: 5", "Transfer-Encoding: chunked"),
			want: []reply{gw(400, "invalid_request")}},
		{name: "TE and CL smuggling a delete", raw: post(list, "0\r\n\r\n"+smuggledDelete, noClose, "Transfer-Encoding: chunked", "Content-Length: 5"),
			want: []reply{gw(400, "invalid_request")}},
		{name: "TE chunked, identity", raw: post(list, chunked(`{}`)+smuggledDelete, noClose, "Transfer-Encoding: chunked, identity"),
			want: []reply{gw(400, "invalid_request")}},
		{name: "TE xchunked", raw: post(list, chunked(`{}`)+smuggledDelete, noClose, "Transfer-Encoding: xchunked"),
			want: []reply{gw(400, "invalid_request")}},
		{name: "TE obs-folded", raw: post(list, chunked(`{}`)+smuggledDelete, noClose, "Transfer-Encoding: identity", " chunked"),
			want: []reply{gw(400, "invalid_request")}},
		{name: "TE twice", raw: post(list, chunked(`{}`)+smuggledDelete, noClose, "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"),
			want: []reply{gw(400, "invalid_request")}},
		{name: "TE with a space before the colon", raw: post(list, chunked(`{}`)+smuggledDelete, noClose, "Transfer-Encoding : chunked"),
			want: badLine},
		{name: "TE on HTTP/1.0 with CL", raw: strings.Replace(post(list, "0\r\n\r\n"+smuggledDelete, noClose, "Transfer-Encoding: chunked", "Content-Length: 5"), "HTTP/1.1", "HTTP/1.0", 1),
			want: []reply{gw(400, "invalid_request")}},
		{name: "two different Content-Lengths", raw: post(list, `{}`+smuggledDelete, noClose, "Content-Length: 2", "Content-Length: 261"),
			want: badLine},
		{name: "Content-Length with a sign", raw: post(list, `{}`+smuggledDelete, noClose, "Content-Length: +2"),
			want: badLine},
		// Well-framed pipelining is fine: the second request is a request of
		// its own, judged on its own.
		{name: "pipelined delete after a CL body", raw: post(list, `{}`, noClose) + deleteAs("/v1/numbers/delete"),
			want: []reply{relayed(200), gw(403, "forbidden")}, forward: list},
		{name: "pipelined delete after a chunked body", raw: post(list, chunked(`{}`), noClose, "Transfer-Encoding: chunked") + post("/v1/numbers/delete", deleteBody),
			want: []reply{relayed(200), gw(403, "forbidden")}, forward: list},
		// A request inside a body is only a body: faxsim rejects it as JSON.
		{name: "delete inside a CL body", raw: post(list, smuggledDelete), want: []reply{relayed(400)}, forward: list},

		// Request-line versions and line endings.
		{name: "HTTP/1.0", raw: strings.Replace(post("/v1/numbers/delete", deleteBody, noClose), "HTTP/1.1", "HTTP/1.0", 1), want: forbidden},
		{name: "HTTP/0.9 simple request", raw: "GET /v1/numbers/delete\r\n\r\n", want: badLine},
		// No head end ever follows: the answer must come when the line
		// ends, not at read_header_timeout (runAttack times the exchange).
		{name: "request line without a version, then silence", raw: "GET /v1/numbers/delete\r\n", want: badLine},
		{name: "POST without a version, with a body", raw: strings.Replace(post("/v1/numbers/delete", deleteBody, noClose), " HTTP/1.1", "", 1), want: badLine},
		{name: "lower-case version", raw: strings.Replace(post("/v1/numbers/delete", deleteBody), "HTTP/1.1", "http/1.1", 1), want: badLine},
		{name: "version with two minor digits", raw: strings.Replace(post("/v1/numbers/delete", deleteBody), "HTTP/1.1", "HTTP/1.10", 1), want: badLine},
		{name: "HTTP/0.9 version", raw: strings.Replace(post("/v1/numbers/delete", deleteBody), "HTTP/1.1", "HTTP/0.9", 1), want: badVersion},
		{name: "HTTP/1.2 version", raw: strings.Replace(post("/v1/numbers/delete", deleteBody), "HTTP/1.1", "HTTP/1.2", 1), want: badVersion},
		{name: "HTTP/2.0 version", raw: strings.Replace(post("/v1/numbers/delete", deleteBody), "HTTP/1.1", "HTTP/2.0", 1), want: badVersion},
		{name: "HTTP/2.0 version on an allowed path, no close", raw: strings.Replace(post(list, `{}`, noClose), "HTTP/1.1", "HTTP/2.0", 1) + post(list, `{}`), want: badVersion},
		{name: "h2c prior-knowledge preface", raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", want: badVersion},
		{name: "HTTP/2.0 request pipelined after a good one", raw: post(list, `{}`, noClose) + strings.Replace(post("/v1/numbers/delete", deleteBody), "HTTP/1.1", "HTTP/2.0", 1),
			want: []reply{relayed(200), gw(505, "http_version_not_supported")}, forward: list},

		// Heads over 32 KiB get 431 in the envelope, whatever their size,
		// and what follows them is never served.
		{name: "40 KiB head", raw: post("/v1/numbers/delete", deleteBody, "X-Pad: "+strings.Repeat("p", 40<<10)), want: tooLarge},
		{name: "200 KiB head, over Go's own limit", raw: post(list, `{}`, "X-Pad: "+strings.Repeat("p", 200<<10)), want: tooLarge},
		{name: "64 KiB head that never ends", raw: "POST " + list + " HTTP/1.1\r\nHost: faxgate.test\r\nX-Pad: " + strings.Repeat("p", 64<<10), want: tooLarge},
		{name: "40 KiB request line", raw: post("/v1/contacts/"+strings.Repeat("a", 40<<10), `{}`), want: tooLarge},
		{name: "big head hiding a pipelined request", raw: post(list, `{}`, noClose, "X-Pad: "+strings.Repeat("p", 33<<10)) + post(list, `{}`), want: tooLarge},
		{name: "head of exactly 32 KiB is served", raw: exactHead(post(list, `{}`), 32<<10), want: ok, forward: list},
		{name: "bare LF line ends", raw: strings.ReplaceAll(post("/v1/numbers/delete", deleteBody), "\r\n", "\n"), want: forbidden},
		// Go tolerates stray line ends only between requests, after a POST.
		{name: "empty lines before the request line", raw: "\r\n\r\n" + post("/v1/numbers/delete", deleteBody), want: []reply{goServer(400)}},
		{name: "empty lines between pipelined requests", raw: post(list, `{}`, noClose) + "\r\n\r\n" + post("/v1/numbers/delete", deleteBody),
			want: []reply{relayed(200), gw(403, "forbidden")}, forward: list},
		{name: "Expect: 100-continue", raw: post("/v1/numbers/delete", deleteBody, "Expect: 100-continue"), want: forbidden},

		// POST /v1/auth in the same spellings: never forwarded.
		{name: "auth", raw: post("/v1/auth", authBody), want: managed},
		{name: "auth upper case", raw: post("/V1/AUTH", authBody), want: managed},
		{name: "auth trailing slash", raw: post("/v1/Auth/", authBody), want: managed},
		{name: "auth with GET", raw: send("GET", "/v1/auth", ""), want: managed},
		{name: "auth with DELETE", raw: send("DELETE", "/v1/auth", authBody), want: managed},
		{name: "auth %2F", raw: post("/v1%2Fauth", authBody), want: badPath},
		{name: "auth encoded letter", raw: post("/v1/%61uth", authBody), want: badPath},
		{name: "auth .json", raw: post("/v1/auth.json", authBody), want: badPath},
		{name: "auth ;param", raw: post("/v1/auth;x=1", authBody), want: badPath},
		{name: "auth dot", raw: post("/v1/./auth", authBody), want: badPath},
		{name: "auth dot-dot", raw: post("/v1/contacts/../auth", authBody), want: badPath},
		{name: "auth backslash", raw: post(`/v1\auth`, authBody), want: badPath},
		{name: "auth //", raw: post("//v1/auth", authBody), want: badPath},
		{name: "auth %00", raw: post("/v1/auth%00", authBody), want: badPath},
		{name: "auth absolute-form", raw: post("http://faxgate.test/v1/auth", authBody), want: badPath},
		{name: "auth lower-case post", raw: send("post", "/v1/auth", authBody), want: []reply{gw(405, "method_not_allowed")}},
		{name: "auth smuggled after CL and TE", raw: post(list, "0\r\n\r\n"+smuggledAuth, noClose, "Content-Length: 5", "Transfer-Encoding: chunked"),
			want: []reply{gw(400, "invalid_request")}},
		{name: "auth pipelined", raw: post(list, `{}`, noClose) + post("/v1/auth", authBody),
			want: []reply{relayed(200), gw(403, "auth_managed")}, forward: list},
	}, goRefusedAttacks()...)
}

// goRefusedDelete is a head Go's server would refuse by itself, in plain
// text before any handler, on a delete of num_1001 by ops, confirmed: the
// sniffer must answer it in the envelope (so it is counted and audited) and
// nothing may reach the upstream. The audit test sends them too.
type goRefusedDelete struct {
	name, raw string
	status    int
	code      string
}

func goRefusedDeletes() []goRefusedDelete {
	del := func(version string, fields ...string) string {
		return "POST /v1/numbers/delete " + version + "\r\n" + strings.Join(fields, "\r\n") + "\r\n\r\n" + deleteBody
	}
	const host, cl = "Host: faxgate.test", "Content-Length: 46"
	std := func(extra ...string) []string {
		return append([]string{"Content-Type: application/json", "X-Faxgate-Caller: ops", "X-Faxgate-Confirm: num_1001"}, extra...)
	}
	bad := func(name, raw string) goRefusedDelete { return goRefusedDelete{name, raw, 400, "invalid_request"} }
	return []goRefusedDelete{
		bad("HTTP/1.1 without Host", del("HTTP/1.1", std(cl)...)),
		bad("two Hosts", del("HTTP/1.1", std(host, "host: faxgate.test", cl)...)),
		bad("Host with a space", del("HTTP/1.1", std("Host: faxgate.test x", cl)...)),
		bad("Host with a path on HTTP/1.0", del("HTTP/1.0", std("Host: faxgate.test/v1/numbers/delete", cl)...)),
		bad("Host folded", del("HTTP/1.1", std(host, " x", cl)...)),
		bad("space before the colon", del("HTTP/1.1", std(host, cl, "X-Note : a")...)),
		bad("name that is not a token", del("HTTP/1.1", std(host, cl, "X(Note): a")...)),
		bad("value with a control byte", del("HTTP/1.1", std(host, cl, "X-Note: a\x01b")...)),
		bad("value with a lone CR", del("HTTP/1.1", std(host, cl, "X-Note: a\rb")...)),
		bad("first field line folded", del("HTTP/1.1", append([]string{" X-Note: a"}, std(host, cl)...)...)),
		bad("line without a colon", del("HTTP/1.1", std(host, cl, "X-Note")...)),
		bad("two different Content-Lengths", del("HTTP/1.1", std(host, cl, "Content-Length: 47")...)),
		bad("non-numeric Content-Length", del("HTTP/1.1", std(host, "Content-Length: 46 bytes")...)),
		bad("Content-Length with TE chunked, not a number", del("HTTP/1.1", std(host, "Transfer-Encoding: chunked", "Content-Length: x")...)),
		{"Expect other than 100-continue", del("HTTP/1.1", std(host, cl, "Expect: 200-ok")...), 417, "expectation_failed"},
		{"Expect on HTTP/1.0", del("HTTP/1.0", std(cl, "Expect: 100-continue-please")...), 417, "expectation_failed"},
	}
}

// goRefusedPrefix names the cases of goRefusedAttacks: HTTP/1 head syntax,
// which has no HTTP/2 form (h2 has no Host field rule, no Expect refusal and
// binary framing).
const goRefusedPrefix = "refused by Go's rules: "

func goRefusedAttacks() []attack {
	var out []attack
	for _, d := range goRefusedDeletes() {
		out = append(out, attack{name: goRefusedPrefix + d.name, raw: d.raw, want: []reply{gw(d.status, d.code)}})
	}
	return out
}

// trustedAttacks run against the gateway that believes identity headers
// from loopback.
func trustedAttacks() []attack {
	forbidden := []reply{gw(403, "forbidden")}
	bad := []reply{gw(400, "invalid_request")}
	confirm := []reply{gw(428, "confirmation_required")}
	const other = `{"number_id":"num_1003","order_id":"ord_5003"}`
	return []attack{
		{name: "control: ops by header, granted and confirmed",
			raw:  opsDelete(`{"number_id":"num_1002","order_id":"ord_5002"}`, "X-Faxgate-Confirm: num_1002"),
			want: []reply{relayed(200)}, forward: "/v1/numbers/delete", control: true},

		// The auth shim answers locally, whoever asks and however spelled.
		{name: "auth shim", raw: post("/v1/auth", authBody), want: []reply{shim}},
		{name: "auth shim upper case, trailing slash", raw: post("/V1/AUTH/", authBody), want: []reply{shim}},
		{name: "auth shim as ops", raw: post("/v1/auth", authBody, "X-Faxgate-Caller: ops"), want: []reply{shim}},
		{name: "auth shim with GET", raw: send("GET", "/v1/auth", ""), want: []reply{gw(405, "method_not_allowed")}},
		{name: "auth shim %2F", raw: post("/v1%2fauth", authBody), want: []reply{gw(400, "invalid_path")}},
		{name: "auth smuggled after CL and TE", raw: post("/v1/contacts/list", "0\r\n\r\n"+smuggledAuth, noClose, "Content-Length: 5", "Transfer-Encoding: chunked"),
			want: bad},

		// The identity header must be spelled exactly, once, in the head.
		{name: "identity header with underscores", raw: post("/v1/numbers/delete", deleteBody, "X_Faxgate_Caller: ops", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "identity header name with a trailing space", raw: post("/v1/numbers/delete", deleteBody, "x-faxgate-caller : ops", "X-Faxgate-Confirm: num_1001"), want: bad},
		{name: "identity header twice", raw: deleteAs("/v1/numbers/delete", "X-Faxgate-Caller: ops"), want: forbidden},
		{name: "identity header list", raw: post("/v1/numbers/delete", deleteBody, "X-Faxgate-Caller: ops, ops", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "identity header upper case value", raw: post("/v1/numbers/delete", deleteBody, "X-Faxgate-Caller: OPS", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "identity header cyrillic o", raw: post("/v1/numbers/delete", deleteBody, "X-Faxgate-Caller: \u043eps", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "identity header with a vertical tab", raw: post("/v1/numbers/delete", deleteBody, "X-Faxgate-Caller: ops\v", "X-Faxgate-Confirm: num_1001"), want: bad},
		{name: "identity header with NUL", raw: post("/v1/numbers/delete", deleteBody, "X-Faxgate-Caller: ops\x00", "X-Faxgate-Confirm: num_1001"), want: bad},
		// A fold does not hide the field's name: Go replaces it with a space
		// (RFC 9112 section 5.2), so from a trusted proxy this is ops, like
		// any other X-Faxgate-Caller: ops that proxy let through. What the
		// corpus pins is that it is still only ops: the confirmation holds.
		{name: "identity header obs-folded", raw: post("/v1/numbers/delete", deleteBody, "X-Faxgate-Caller:", " ops", "X-Faxgate-Confirm: num_1002"), want: confirm},
		{name: "identity header inside another header's fold", raw: post("/v1/numbers/delete", deleteBody, "X-Note: a", " X-Faxgate-Caller: ops", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "identity header in a trailer", raw: post("/v1/numbers/delete", "", "Transfer-Encoding: chunked", "Content-Type: application/json",
			"Trailer: X-Faxgate-Caller", "X-Faxgate-Confirm: num_1001") + withTrailer(deleteBody, "X-Faxgate-Caller: ops"), want: forbidden},
		{name: "XFCC with a forged first element", raw: post("/v1/numbers/delete", deleteBody,
			"X-Forwarded-Client-Cert: URI=spiffe://faxgate.test/ops,By=spiffe://faxgate.test/gw;URI=spiffe://faxgate.test/nobody", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "XFCC two lines, the proxy's last", raw: post("/v1/numbers/delete", deleteBody,
			"X-Forwarded-Client-Cert: URI=spiffe://faxgate.test/ops", "X-Forwarded-Client-Cert: URI=spiffe://faxgate.test/nobody", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "XFCC malformed", raw: post("/v1/numbers/delete", deleteBody,
			`X-Forwarded-Client-Cert: URI=spiffe://faxgate.test/ops;Subject="unterminated`, "X-Faxgate-Confirm: num_1001"), want: forbidden},
		{name: "XFCC upper-case scheme", raw: post("/v1/numbers/delete", deleteBody,
			"X-Forwarded-Client-Cert: URI=SPIFFE://faxgate.test/ops", "X-Faxgate-Confirm: num_1001"), want: forbidden},
		// A refused request's body is skipped, never read as a request, even
		// when it holds one the trusted peer could have sent for real.
		{name: "refused request's unread body holds a confirmed delete", raw: post("/v1/numbers/delete", smuggledDelete, noClose) + post("/v1/contacts/list", `{}`),
			want: []reply{gw(403, "forbidden"), relayed(200)}, forward: "/v1/contacts/list"},
		{name: "refused 100-continue request's body holds a confirmed delete", raw: post("/v1/numbers/delete", smuggledDelete, noClose, "Expect: 100-continue") + post("/v1/contacts/list", `{}`),
			want: []reply{gw(403, "forbidden")}},
		{name: "svc confirms but is not granted", raw: post("/v1/numbers/delete", deleteBody, "X-Faxgate-Confirm: num_1001"), want: forbidden},

		// The confirmation rule, for the caller that is granted the delete.
		{name: "no confirmation", raw: opsDelete(deleteBody), want: confirm},
		{name: "mismatched confirmation", raw: opsDelete(deleteBody, "X-Faxgate-Confirm: num_1002"), want: confirm},
		{name: "confirmation twice", raw: opsDelete(deleteBody, "X-Faxgate-Confirm: num_1001", "X-Faxgate-Confirm: num_1001"), want: confirm},
		{name: "confirmation twice, one matching", raw: opsDelete(deleteBody, "X-Faxgate-Confirm: num_1002", "X-Faxgate-Confirm: num_1001"), want: confirm},
		{name: "confirmation as a list", raw: opsDelete(deleteBody, "X-Faxgate-Confirm: num_1001, num_1001"), want: confirm},
		{name: "confirmation in a trailer", raw: post("/v1/numbers/delete", "", "X-Faxgate-Caller: ops", "Transfer-Encoding: chunked",
			"Content-Type: application/json", "Trailer: X-Faxgate-Confirm") + withTrailer(deleteBody, "X-Faxgate-Confirm: num_1001"), want: confirm},
		{name: "duplicate key", raw: opsDelete(`{"number_id":"num_1001","number_id":"num_1003","order_id":"ord_5003"}`, "X-Faxgate-Confirm: num_1001"), want: bad},
		{name: "case-folded duplicate key", raw: opsDelete(`{"number_id":"num_1001","Number_ID":"num_1003","order_id":"ord_5003"}`, "X-Faxgate-Confirm: num_1001"), want: bad},
		{name: "upper-case key alone", raw: opsDelete(`{"NUMBER_ID":"num_1003","order_id":"ord_5003"}`, "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: `\u-escaped duplicate key`, raw: opsDelete(`{"number_id":"num_1001","number\u005fid":"num_1003","order_id":"ord_5003"}`, "X-Faxgate-Confirm: num_1001"), want: bad},
		{name: "kelvin-sign folded key", raw: opsDelete(`{"order_id":"ord_5003","number_id":"num_1003","order_id\u212a":"x","\u212a":"1","k":"2"}`, "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "second object after the first", raw: opsDelete(`{"number_id":"num_1001"}`+other, "X-Faxgate-Confirm: num_1001"), want: bad},
		{name: "data after the object", raw: opsDelete(deleteBody+` x`, "X-Faxgate-Confirm: num_1001"), want: bad},
		{name: "array of objects", raw: opsDelete(`[`+other+`]`, "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "number_id as a number", raw: opsDelete(`{"number_id":1003,"order_id":"ord_5003"}`, "X-Faxgate-Confirm: 1003"), want: bad},
		{name: "unpaired surrogate", raw: opsDelete(`{"number_id":"num_1003\ud800","order_id":"ord_5003"}`, "X-Faxgate-Confirm: num_1003\xef\xbf\xbd"), want: bad},
		{name: "byte order mark", raw: opsDelete("\xef\xbb\xbf"+other, "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "invalid UTF-8 in the body", raw: opsDelete(`{"number_id":"num_1003","order_id":"ord_5003","x":"`+"\xff"+`"}`, "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "form-encoded body", raw: opsDelete("number_id=num_1003&order_id=ord_5003", "Content-Type: application/x-www-form-urlencoded", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "JSON body sent as a form", raw: opsDelete(other, "Content-Type: application/x-www-form-urlencoded", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "two Content-Types", raw: opsDelete(other, "Content-Type: application/json", "Content-Type: application/x-www-form-urlencoded", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Content-Type list", raw: opsDelete(other, "Content-Type: application/json, application/x-www-form-urlencoded", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "text/plain", raw: opsDelete(other, "Content-Type: text/plain", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "no Content-Type", raw: strings.Replace(opsDelete(other, "X-Faxgate-Confirm: num_1003"), "Content-Type: application/json\r\n", "", 1), want: bad},
		// The checked Content-Type must reach the upstream, and the body it
		// reads must be the bytes checked: Connection may not name either
		// header (the forward drops what Connection names), and no
		// Content-Encoding is taken, in any spelling.
		{name: "Connection names Content-Type", raw: opsDelete(other, "Connection: close, Content-Type", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Connection names content-type in lower case", raw: opsDelete(other, "Connection: close, content-type", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Connection names Content_Type", raw: opsDelete(other, "Connection: close,Content_Type", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Connection names Content-Encoding", raw: opsDelete(other, "Connection: close", "Connection: Content-Encoding", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Content-Encoding gzip", raw: opsDelete(other, "Content-Encoding: gzip", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Content-Encoding identity", raw: opsDelete(other, "Content-Encoding: identity", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Content-Encoding empty", raw: opsDelete(other, "Content-Encoding:", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Content_Encoding", raw: opsDelete(other, "Content_Encoding: gzip", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "Content_Type beside Content-Type", raw: opsDelete(other, "Content_Type: application/x-www-form-urlencoded", "X-Faxgate-Confirm: num_1003"), want: bad},
		{name: "query string with another number", raw: deleteAs("/v1/numbers/delete?number_id=num_1003"), want: bad},
		{name: "query string of anything", raw: deleteAs("/v1/numbers/delete?x=1"), want: bad},
		{name: "query mark with a fragment", raw: deleteAs("/v1/numbers/delete?#"), want: []reply{gw(400, "invalid_path")}},

		// The granted caller still cannot take another method or spelling.
		{name: "ops DELETE", raw: send("DELETE", "/v1/numbers/delete", deleteBody, "X-Faxgate-Caller: ops", "X-Faxgate-Confirm: num_1001"),
			want: []reply{gw(405, "method_not_allowed")}},
		{name: "ops GET with method override", raw: send("GET", "/v1/numbers/delete", deleteBody, "X-Faxgate-Caller: ops", "X-Faxgate-Confirm: num_1001", "X-HTTP-Method-Override: POST"),
			want: []reply{gw(405, "method_not_allowed")}},
		{name: "ops %2F", raw: deleteAs("/v1/numbers%2Fdelete"), want: []reply{gw(400, "invalid_path")}},
		{name: "ops .json", raw: deleteAs("/v1/numbers/delete.json"), want: []reply{gw(400, "invalid_path")}},
		{name: "ops below the delete path", raw: deleteAs("/v1/numbers/delete/num_1001"), want: forbidden},
		{name: "ops below the delete path, upper case", raw: deleteAs("/V1/NUMBERS/DELETE/X/Y"), want: forbidden},
		{name: "ops confirmed delete as HTTP/2.0", raw: strings.Replace(deleteAs("/v1/numbers/delete"), "HTTP/1.1", "HTTP/2.0", 1),
			want: []reply{gw(505, "http_version_not_supported")}},
		{name: "ops confirmed delete as HTTP/1.2", raw: strings.Replace(deleteAs("/v1/numbers/delete"), "HTTP/1.1", "HTTP/1.2", 1),
			want: []reply{gw(505, "http_version_not_supported")}},
		{name: "ops confirmed delete without a version", raw: strings.Replace(deleteAs("/v1/numbers/delete"), " HTTP/1.1", "", 1),
			want: []reply{gw(400, "invalid_request")}},
		{name: "ops confirmed delete behind a 40 KiB head", raw: deleteAs("/v1/numbers/delete", "X-Pad: "+strings.Repeat("p", 40<<10)),
			want: []reply{gw(431, "headers_too_large")}},
		{name: "ops confirmed delete smuggled after CL and TE", raw: post("/v1/contacts/list", "0\r\n\r\n"+smuggledDelete, noClose, "Content-Length: 5", "Transfer-Encoding: chunked"),
			want: bad},
	}
}

func TestBypassCorpusUntrustedPeer(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: untrustedCallers})
	runAttacks(t, g, untrustedAttacks())
}

func TestBypassCorpusTrustedPeer(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: trustedCallers})
	runAttacks(t, g, trustedAttacks())
}

func runAttacks(t *testing.T, g *gatewaytest.Gateway, cases []attack) {
	t.Helper()
	owned := len(g.Sim.OwnedNumbers())
	controls, seen := 0, map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("case name %q used twice", tc.name)
		}
		seen[tc.name] = true
		if tc.control {
			controls++
		}
		t.Run(tc.name, func(t *testing.T) { runAttack(t, g, tc) })
	}
	if got := len(g.Sim.OwnedNumbers()); got != owned-controls {
		t.Fatalf("owned numbers went from %d to %d, want exactly the %d control delete(s)", owned, got, controls)
	}
}

// runAttack sends one case and checks the answers and what the upstream got.
func runAttack(t *testing.T, g *gatewaytest.Gateway, tc attack) {
	sim := g.Sim
	// From here on, faxsim's counts and recorded requests are this case's
	// alone (its numbers and tokens stay).
	sim.Reset()

	start := time.Now()
	var out string
	if tc.from != "" {
		out = rawFrom(t, g, tc.from, tc.raw)
	} else {
		out = g.Raw(t, tc.raw, rawTimeout)
	}
	if d := time.Since(start); d > rawTimeout/2 {
		t.Errorf("the connection stayed open %v: the server did not close it after its reply", d)
	}

	checkExchange(t, g, tc, readAnswers(t, out), out)
}

// checkExchange checks the answers to one case (raw is what they were
// read from, for messages) and what the upstream got.
func checkExchange(t *testing.T, g *gatewaytest.Gateway, tc attack, got []response, out string) {
	t.Helper()
	sim := g.Sim
	if len(got) != len(tc.want) {
		t.Fatalf("got %d answers, want %d: %q", len(got), len(tc.want), out)
	}
	for i, w := range tc.want {
		checkAnswer(t, i, got[i], w)
	}

	// What the upstream received: the heart of the matter.
	recs := sim.Requests()
	deletes := sim.RouteCounts()["POST /v1/numbers/delete"]
	wantDeletes := 0
	if tc.control {
		wantDeletes = 1
	}
	if deletes != wantDeletes {
		t.Errorf("the upstream counted %d POST /v1/numbers/delete, want %d", deletes, wantDeletes)
	}
	if n := sim.AuthCalls(); n != 0 {
		t.Errorf("the upstream counted %d POST /v1/auth", n)
	}
	for _, r := range recs {
		if reads := upstreamReading(r.Path); (reads == "/v1/numbers/delete" && !tc.control) || reads == "/v1/auth" {
			t.Errorf("the upstream received %s %q, which it could read as %s", r.Method, r.Path, reads)
		}
		checkForwardedHeaders(t, r)
	}
	switch {
	case tc.forward == "" && len(recs) != 0:
		t.Errorf("the upstream received %d request(s), first %s %q; want none", len(recs), recs[0].Method, recs[0].Path)
	case tc.forward != "" && (len(recs) != 1 || recs[0].Path != tc.forward):
		var paths []string
		for _, r := range recs {
			paths = append(paths, r.Method+" "+r.Path)
		}
		t.Errorf("the upstream received %q, want exactly %s", paths, tc.forward)
	}
}

// checkAnswer compares the i-th response with what the case expects.
func checkAnswer(t *testing.T, i int, got response, w reply) {
	t.Helper()
	if got.status != w.status {
		t.Errorf("reply %d: status %d, want %d; body %q", i, got.status, w.status, got.body)
		return
	}
	isJSON := strings.HasPrefix(got.header.Get("Content-Type"), "application/json")
	switch w.from {
	case byGateway:
		if !isJSON || got.header.Get("X-Request-Id") == "" {
			t.Errorf("reply %d: not the gateway's envelope: %v %q", i, got.header, got.body)
			return
		}
		if _, _, code := gatewaytest.Envelope(t, got.body); code != w.code {
			t.Errorf("reply %d: error %q, want %q; body %q", i, code, w.code, got.body)
		}
	case byUpstream:
		if strings.Contains(got.body, `"error"`) || got.header.Get("X-Ratelimit-Limit") == "" {
			t.Errorf("reply %d: not relayed from the upstream: %v %q", i, got.header, got.body)
		}
	case byShim:
		if !strings.Contains(got.body, `"access_token":"faxgate-managed"`) {
			t.Errorf("reply %d: not the auth shim's placeholder: %q", i, got.body)
		}
	case byGoServer:
		if isJSON || got.header.Get("X-Request-Id") != "" {
			t.Errorf("reply %d: want net/http's own refusal, got a handler's reply: %v %q", i, got.header, got.body)
		}
	}
}

// checkForwardedHeaders: whatever reached the upstream carries no override,
// rewrite, identity or confirmation header, and no header that points at
// the delete or the token endpoint.
func checkForwardedHeaders(t *testing.T, r faxsim.Recorded) {
	t.Helper()
	for _, h := range []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Url",
		"X-Rewrite-Url", "X-Override-Url", "Api-Key", "X-Api-Key", "X-Auth-Token", "X-Access-Token",
		"X-Faxgate-Caller", "X-Forwarded-Client-Cert", "X-Faxgate-Confirm", "X-Forwarded-Uri",
		"X-Forwarded-Prefix", "Connection", "Trailer", "Transfer-Encoding", "X-Faxgate-Both-Te"} {
		if v, ok := r.Header[h]; ok {
			t.Errorf("the upstream received %s: %q", h, v)
		}
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			if l := strings.ToLower(v); strings.Contains(l, "numbers/delete") || strings.Contains(l, "/v1/auth") {
				t.Errorf("the upstream received %s: %q", k, v)
			}
		}
	}
	if a := r.Header.Values("Authorization"); len(a) != 1 || !strings.HasPrefix(a[0], "Bearer ") || a[0] == "Bearer x" {
		t.Errorf("the upstream received Authorization %q, want only the gateway's token", a)
	}
}

// upstreamReading returns the path an upstream, or a server or proxy behind
// the gateway, could make of a received path if it were lenient in every
// way we know of: letter case, percent-decoding (repeated), fullwidth forms
// (NFKC), backslashes as slashes, truncation at NUL, ";" parameters, empty
// and dot segments, a trailing slash, blanks and a ".json" suffix.
func upstreamReading(p string) string {
	for range 3 {
		if d, err := url.PathUnescape(p); err == nil {
			p = d
		}
	}
	p = strings.Map(func(r rune) rune {
		switch {
		case r >= 0xff01 && r <= 0xff5e:
			return r - 0xfee0
		case r == '\u2215' || r == '\u2044' || r == '\\':
			return '/'
		case r == utf8.RuneError:
			return -1
		}
		return r
	}, strings.ToLower(p))
	if i := strings.IndexAny(p, "\x00?#"); i >= 0 {
		p = p[:i]
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		s, _, _ = strings.Cut(s, ";")
		segs[i] = strings.TrimRight(s, " \t")
	}
	p = path.Clean("/" + strings.Join(segs, "/"))
	return strings.TrimSuffix(p, ".json")
}

func TestUpstreamReading(t *testing.T) {
	// The checker itself must see through every spelling in the corpus.
	for _, p := range []string{"/v1/numbers/delete", "/V1/Numbers/Delete/", "/v1/numbers%2Fdelete", "/v1/numbers%252fdelete",
		"/v1/contacts/%2e%2e/numbers/delete", `/v1\numbers\delete`, "//v1//numbers/delete/", "/v1/numbers/delete;jsessionid=x",
		"/v1/numbers;x/delete", "/v1/numbers/delete.json", "/v1/numbers/delete%00.png", "/v1/numbers/delete%20",
		"/v1/numbers\uff0fdelete", "/v1/\uff4e\uff55\uff4d\uff42\uff45\uff52\uff53/delete", "/x/../v1/./numbers/delete/.",
		"/v1/numbers/delete?x", "/v1/numbers\u2215delete"} {
		if got := upstreamReading(p); got != "/v1/numbers/delete" {
			t.Errorf("upstreamReading(%q) = %q, want /v1/numbers/delete", p, got)
		}
	}
	if got := upstreamReading("/v1/contacts/list"); got != "/v1/contacts/list" {
		t.Errorf("upstreamReading(/v1/contacts/list) = %q", got)
	}
}

// response is one parsed reply.
type response struct {
	status int
	header http.Header
	body   string
}

// readAnswers parses every HTTP response in out; bytes that are not a
// response fail the test.
func readAnswers(t *testing.T, out string) []response {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(out))
	var got []response
	for {
		if _, err := br.Peek(1); err == io.EOF {
			return got
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reply %d unreadable (%v) in %q", len(got), err, out)
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("reply %d body: %v in %q", len(got), err, out)
		}
		if resp.StatusCode == http.StatusContinue {
			continue
		}
		got = append(got, response{resp.StatusCode, resp.Header, b.String()})
	}
}

// rawFrom is g.Raw from a chosen loopback address.
func rawFrom(t *testing.T, g *gatewaytest.Gateway, local, raw string) string {
	t.Helper()
	c, err := g.Dial(&net.TCPAddr{IP: net.ParseIP(local)}, rawTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(rawTimeout))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(c)
	return out.String()
}

// Every head of goRefusedDeletes is one Go's own server refuses before any
// handler, with the status the gateway now answers in the envelope: the
// corpus tests the gap it claims to close.
func TestGoRefusedDeletesAreRefusedByGo(t *testing.T) {
	reached := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
	}))
	defer srv.Close()
	for _, d := range goRefusedDeletes() {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		go func() { _, _ = io.WriteString(c, d.raw) }()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		select {
		case <-reached:
			t.Errorf("%s: Go's server ran the handler", d.name)
			continue
		default:
		}
		if err != nil || resp.StatusCode != d.status {
			t.Errorf("%s: Go's server answered %v (%v), want its own %d", d.name, resp, err, d.status)
		}
	}
}
