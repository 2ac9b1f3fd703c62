package proxy_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
)

// fuzzCallers lets every loopback peer call every route, the delete
// included, without confirmation, so that whatever route policy decides on
// can be forwarded and compared with what the upstream got. The extra routes
// add a DELETE route, parameter segments and a catch-all pair of parameters
// that could capture a misspelt fixed route.
const fuzzCallers = `
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*", "numbers.delete"]
rate_limit:
  default: { rps: 1000000, burst: 1000000 }
routes:
  extra:
    - { name: faxes.send, method: POST, path: /v1/faxes/send }
    - { name: faxes.delete, method: DELETE, path: /v1/faxes/delete }
    - { name: documents.get, method: GET, path: "/v1/documents/{documentId}" }
    - { name: generic.pair, method: PUT, path: "/v1/{a}/{b}" }
policy:
  confirm: []
`

// fuzzMethods is what the fuzzer's method index picks from: the five the
// gateway forwards, and some it refuses.
var fuzzMethods = []string{"POST", "GET", "DELETE", "PATCH", "PUT", "post", "OPTIONS", "CONNECT", "HEAD"}

// fuzzBody names a number that does not exist: a forwarded delete changes nothing.
const fuzzBody = `{"number_id":"num_9999","order_id":"ord_9999"}`

// FuzzGatewayRoute sends one raw request per input over TCP to a real
// gateway in front of faxsim. Its property: when the access log says the
// gateway forwarded the request as route R (upstream_status set), faxsim
// received exactly that one request, on R's canonical path (for
// "unmatched": on the path the caller sent, made only of [A-Za-z0-9_/-]
// and matching no route however an upstream might read it), and never at
// or below /v1/auth, whatever the route; when the gateway refused it, or
// Go's server did before the gateway saw it, faxsim received nothing.
func FuzzGatewayRoute(f *testing.F) {
	for _, s := range []struct {
		method uint8 // index into fuzzMethods
		target string
		header string // one extra header line, or ""
	}{
		{0, "/v1/numbers/delete", ""},                                  // the sensitive route, forwarded canonically
		{0, "/V1/Numbers/DELETE/", ""},                                 // case and one trailing slash
		{0, "/v1/auth", ""},                                            // owned by the gateway, never forwarded
		{0, "/v1/numbers%2Fdelete", ""},                                // encoded slash
		{0, "/v1/numbers%252Fdelete", ""},                              // double-encoded slash
		{0, "/v1/contacts/%2e%2e/numbers/delete", ""},                  // encoded dot segment
		{0, "/v1/contacts/../numbers/delete", ""},                      // dot segment
		{0, "/v1/numbers/delete/.", ""},                                // trailing dot segment
		{0, `/v1\numbers\delete`, ""},                                  // backslashes
		{0, "//v1/numbers/delete", ""},                                 // scheme-relative
		{0, "/v1/numbers/delete;jsessionid=x", ""},                     // ; parameter
		{0, "/v1/numbers/delete.json", ""},                             // suffix
		{0, "/v1/numbers/d\u0435lete", ""},                             // Cyrillic lookalike
		{0, "/v1/numbers\uff0fdelete", ""},                             // fullwidth solidus
		{0, "/v1/numbers/delete\t", ""},                                // control byte (Go refuses)
		{0, "http://faxgate.test/v1/numbers/delete", ""},               // absolute-form
		{7, "127.0.0.1:80", ""},                                        // authority-form
		{6, "*", ""},                                                   // asterisk-form
		{1, "/v1/numbers/delete", "X-HTTP-Method-Override: POST"},      // method override on another method
		{0, "/v1/contacts/list", "X-Original-URL: /v1/numbers/delete"}, // rewrite header
		{0, "/v1/contacts/list?_method=DELETE", ""},                    // override in the query
		{0, "/v1/contacts/list", "Transfer-Encoding: chunked"},         // CL and TE
		{5, "/v1/numbers/delete", ""},                                  // lower-case method
		{2, "/v1/esign_templates/tpl_1/theme", ""},                     // parameter route
		{3, "/V1/ESIGN_TEMPLATES/tpl_1/FIELDS/f_1/", ""},               // two parameters, case folded
		{4, "/v1/numbers/delete-x", ""},                                // catch-all pair, near the delete
		{4, "/v1/Numbers/Delete", ""},                                  // PUT on the delete's path: 405
		{1, "/v1/documents/numbers", ""},                               // parameter that names a segment
		{0, "/v1/faxes/received", ""},                                  // the catch-all's path, not its method: 405
		{0, "/v1/faxes/received/today", ""},                            // unmatched, forwarded as sent
		{0, "/V1/Faxes/Received/Today/", ""},                           // unmatched with case and slash
		{0, "/v1/a/b/c/d?x=1", ""},                                     // unmatched with a query
		{0, "/", ""},                                                   // outside /v1/
		{0, "/v1/auth/x", ""},                                          // below the token endpoint: 403 auth_managed
		{2, "/v1/auth/revoke", ""},                                     // an undocumented token operation
		{1, "/V1/Auth/Refresh", ""},                                    // below auth, case folded
		{3, "/v1/AUTH/x/y/", ""},                                       // below auth, deeper, trailing slash
		{4, "/v1/auth/x", ""},                                          // below auth, where the catch-all pair matches
		{0, "/v1/auth/token/revoke?all=1", ""},                         // below auth, where no route matches
		{0, "/v1/authx", ""},                                           // a sibling of auth: unmatched, forwarded
	} {
		f.Add(s.method, s.target, s.header)
	}

	// One gateway per fuzzing process: starting one per input would cost
	// far more than the request.
	g := gatewaytest.Start(f, gatewaytest.Options{Config: fuzzCallers})
	routes := append(config.BuiltinRoutes(), g.Config.Routes.Extra...)
	seq, logOff := 0, 0

	f.Fuzz(func(t *testing.T, m uint8, target, header string) {
		// A line end in either would write another head (or a whole second
		// request) rather than a request-target or one header line.
		if strings.ContainsAny(target, "\r\n") || strings.ContainsAny(header, "\r\n") {
			t.Skip()
		}
		method := fuzzMethods[int(m)%len(fuzzMethods)]
		seq++
		id := "fuzz-" + strconv.Itoa(seq)
		g.Sim.Reset() // Requests and RouteCounts are now this input's alone

		// The fuzzed header goes last, so it cannot fold into or shadow the
		// request ID or Connection: close.
		raw := method + " " + target + " HTTP/1.1\r\nHost: faxgate.test\r\nX-Request-Id: " + id +
			"\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(fuzzBody)) + "\r\n"
		if header != "" {
			raw += header + "\r\n"
		}
		raw += "\r\n" + fuzzBody
		closed := exchangeWithin(t, g.Addr, raw, 2*time.Second)

		line := accessLine(t, g, id, &logOff, !closed)
		// A path below /v1/auth never resolves to a route, forwardable or
		// not: the request is refused before routing (route "none").
		if line != nil && targetBelowAuth(target) && line["route"] != "none" {
			t.Fatalf("%s %q lies below /v1/auth but resolved to route %v: %v", method, target, line["route"], line)
		}
		recs := g.Sim.Requests()
		for _, r := range recs {
			if got := r.Header.Get("X-Request-Id"); got != id {
				t.Fatalf("the upstream received %s %q with X-Request-Id %q, not this request's %q", r.Method, r.Path, got, id)
			}
		}
		if line == nil || line["upstream_status"] == float64(0) {
			if len(recs) != 0 {
				t.Fatalf("refused (access line %v), yet the upstream received %s %q", line, recs[0].Method, recs[0].Path)
			}
			if line != nil && line["route"] == "auth" && line["status"] == float64(200) {
				t.Fatalf("auth answered 200 without the shim: %v", line)
			}
			return
		}
		route, _ := line["route"].(string)
		if len(recs) != 1 {
			t.Fatalf("forwarded as %s: the upstream received %d requests, want 1", route, len(recs))
		}
		checkForwardedRoute(t, routes, g.Sim, route, method, target, recs[0])
	})
}

// checkForwardedRoute checks that rec, the one request faxsim received for
// a request with method and target that the gateway forwarded as route, is
// that route on its canonical path, and never the token endpoint or a path
// below it.
func checkForwardedRoute(t *testing.T, routes []config.Route, sim *faxsim.Sim, route, method, target string, rec faxsim.Recorded) {
	t.Helper()
	if rec.Method != method {
		t.Fatalf("the upstream received method %q, want %q", rec.Method, method)
	}
	if reads := upstreamReading(rec.Path); reads == "/v1/auth" || isBelowAuth(reads) {
		t.Fatalf("forwarded as %s: the upstream received %q, which it could read as %s, the token endpoint's", route, rec.Path, reads)
	}
	for i := 0; i < len(rec.Path); i++ {
		if c := rec.Path[i]; !(c == '/' || c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			t.Fatalf("the upstream received path %q, outside [A-Za-z0-9_/-]", rec.Path)
		}
	}
	reads := upstreamReading(rec.Path)
	if route == "unmatched" {
		// The caller's path, with "/v1" in lower case and one trailing
		// slash removed (docs/callers-and-policy.md, Routes).
		want, _, _ := strings.Cut(target, "?")
		want = strings.TrimSuffix(want, "/")
		if len(want) >= 3 {
			want = "/v1" + want[3:]
		}
		if rec.Path != want {
			t.Fatalf("unmatched: the upstream received %q, want the caller's path %q", rec.Path, want)
		}
		for _, r := range routes {
			if patternMatch(r.Path, reads, true) {
				t.Fatalf("unmatched: the upstream received %q, which it could read as route %s (%s)", rec.Path, r.Name, r.Path)
			}
		}
		return
	}
	var rt *config.Route
	for i := range routes {
		if routes[i].Name == route {
			rt = &routes[i]
		}
	}
	switch {
	case rt == nil:
		t.Fatalf("forwarded as %q, which is no route", route)
	case route == "auth":
		t.Fatalf("POST /v1/auth was forwarded for a caller: %s %q", rec.Method, rec.Path)
	case rt.Method != rec.Method:
		t.Fatalf("forwarded as %s (%s %s) with method %s", route, rt.Method, rt.Path, rec.Method)
	case !patternMatch(rt.Path, rec.Path, false):
		t.Fatalf("forwarded as %s: the upstream received %q, not %s in its canonical spelling", route, rec.Path, rt.Path)
	}
	// However leniently the upstream reads it, the path means no other route.
	for _, r := range routes {
		if r.Name != route && r.Method == rec.Method && patternMatch(r.Path, reads, true) && !patternMatch(r.Path, rt.Path, true) {
			t.Fatalf("forwarded as %s: the upstream could read %q as %s too", route, rec.Path, r.Name)
		}
	}
	// faxsim's own exact table agrees, for the routes it knows.
	if !strings.HasPrefix(rt.Name, "documents.") && !strings.HasPrefix(rt.Name, "generic.") {
		if n := sim.RouteCounts()[rec.Method+" "+rt.Path]; n != 1 {
			t.Fatalf("faxsim counted %d %s %s, want 1 (counts %v)", n, rec.Method, rt.Path, sim.RouteCounts())
		}
	}
}

// patternMatch reports whether p matches the route pattern: fixed segments
// exactly (or ignoring ASCII case with fold), "{name}" segments any
// non-empty [A-Za-z0-9_-]+.
func patternMatch(pattern, p string, fold bool) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(p, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i, s := range ps {
		switch {
		case strings.HasPrefix(s, "{"):
			if xs[i] == "" || strings.Trim(xs[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
				return false
			}
		case fold && !strings.EqualFold(s, xs[i]), !fold && s != xs[i]:
			return false
		}
	}
	return true
}

// exchangeWithin writes raw on a new connection and reads until the server
// closes it or d passes; it reports whether the server closed it.
func exchangeWithin(t *testing.T, addr, raw string, d time.Duration) (closed bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	// The server may refuse a head before reading all of it; its answer is
	// still to be read.
	_, _ = c.Write([]byte(raw))
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// accessLine returns the access line of request id, or nil if the gateway's
// handler never saw it. The handler writes the line before it returns, and
// so before the server closes a Connection: close connection; only when the
// exchange timed out (wait) may it still be coming. *off is where the
// previous search ended: the log only grows, and searching all of it for
// every input would make the fuzzer slower with every input.
func accessLine(t *testing.T, g *gatewaytest.Gateway, id string, off *int, wait bool) map[string]any {
	t.Helper()
	needle := `"request_id":"` + id + `"`
	var limit time.Duration // one look
	if wait {
		limit = 3 * time.Second
	}
	var line map[string]any
	var logs string
	_ = eventually.Wait(limit, func() error {
		logs = g.Logs()
		rest := logs[*off:]
		if !strings.Contains(rest, needle) {
			return errNoLine
		}
		for _, ln := range strings.Split(rest, "\n") {
			if !strings.Contains(ln, needle) {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(ln), &m); err != nil {
				t.Fatalf("log line %q: %v", ln, err)
			}
			if m["msg"] == "request" {
				line = m
				return nil
			}
		}
		return errNoLine
	})
	*off = len(logs)
	return line
}

var errNoLine = errors.New("no access line yet")
