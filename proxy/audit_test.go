package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/proxy"
	"github.com/faxgate/faxgate/tokencache"
)

// auditCallers: loopback is no caller by address, so a request without an
// identity header is unidentified; ops may delete, svc may not, slow may
// delete once and is then rate-limited.
const auditCallers = `
server:
  max_body_bytes: 2097152
  read_timeout: 300ms
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - name: ops
      header_values: ["ops"]
      allow: ["*", "numbers.delete"]
    - name: svc
      header_values: ["svc"]
      allow: ["*"]
    - name: slow
      header_values: ["slow"]
      allow: ["numbers.delete"]
      rate_limit: { rps: 0.001, burst: 1 }
rate_limit:
  default: { rps: 1000, burst: 1000 }
`

// auditCase is one request and the audit line it must leave (or none).
type auditCase struct {
	name string
	// setup, when set, shapes the upstream for this request only.
	setup func(g *gatewaytest.Gateway)
	// raw is sent on its own TCP connection; otherwise method, target, body
	// and hdr go through the gateway's client.
	raw            string
	method, target string
	body           string
	hdr            []string
	// callerGone: the caller gives up after 150 ms.
	callerGone bool
	// trickle: raw is sent, and the connection then stays silent.
	trickle bool

	status   int    // the answer the caller gets (499: none)
	lines    int    // audit lines wanted: 1, or 0 for a path that is not a sensitive route
	caller   string // the audit line's fields
	decision string
	reason   string
	upstream int
	number   string
	order    string
}

const (
	auditBody = `{"number_id":"num_1001","order_id":"ord_5001"}`
	auditDel  = "/v1/numbers/delete"
)

func opsConfirmed(extra ...string) []string {
	return append([]string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1001"}, extra...)
}

// rawDelete is a raw delete request with the audit body, as caller.
func rawDelete(version, caller string, extra ...string) string {
	lines := []string{"POST " + auditDel + " " + version, "Host: faxgate.test", "Connection: close",
		"Content-Type: application/json", "Content-Length: " + strconv.Itoa(len(auditBody))}
	if caller != "" {
		lines = append(lines, "X-Faxgate-Caller: "+caller)
	}
	return strings.Join(append(lines, extra...), "\r\n") + "\r\n\r\n" + auditBody
}

// auditCases drives every refusal the handler can make of a request whose
// path is a sensitive route's, and every way such a request can end after
// it was forwarded. The order matters only for slow's rate limit.
func auditCases(reset *atomic.Bool) []auditCase {
	denied := func(c auditCase, status int, caller, reason, number, order string) auditCase {
		c.status, c.lines, c.caller, c.decision, c.reason, c.number, c.order = status, 1, caller, "denied", reason, number, order
		return c
	}
	big := strings.Repeat("x", 1<<20+10) // over the 1 MiB replay buffer, under max_body_bytes
	cases := []auditCase{
		// The upstream answered: forwarded, whatever it answered.
		{name: "forwarded 200", method: "POST", target: auditDel, body: auditBody, hdr: opsConfirmed(),
			status: 200, lines: 1, caller: "ops", decision: "forwarded", upstream: 200, number: "num_1001", order: "ord_5001"},
		{name: "forwarded upstream 422", setup: func(g *gatewaytest.Gateway) { g.Sim.FailNext(1, 422) },
			method: "POST", target: auditDel, body: auditBody, hdr: opsConfirmed(),
			status: 422, lines: 1, caller: "ops", decision: "forwarded", upstream: 422, number: "num_1001", order: "ord_5001"},
		{name: "forwarded upstream 500", setup: func(g *gatewaytest.Gateway) { g.Sim.FailNext(1, 500) },
			method: "POST", target: auditDel, body: auditBody, hdr: opsConfirmed(),
			status: 500, lines: 1, caller: "ops", decision: "forwarded", upstream: 500, number: "num_1001", order: "ord_5001"},

		// Sent upstream, no answer: unknown, the delete may have happened.
		{name: "unknown on upstream timeout", setup: func(g *gatewaytest.Gateway) { g.Sim.SetLatency(3 * time.Second) },
			method: "POST", target: auditDel, body: auditBody, hdr: opsConfirmed(),
			status: 504, lines: 1, caller: "ops", decision: "unknown", reason: "upstream_timeout", number: "num_1001", order: "ord_5001"},
		{name: "unknown on upstream reset", setup: func(*gatewaytest.Gateway) { reset.Store(true) },
			method: "POST", target: auditDel, body: auditBody, hdr: opsConfirmed(),
			status: 502, lines: 1, caller: "ops", decision: "unknown", reason: "upstream_unavailable", number: "num_1001", order: "ord_5001"},
		{name: "unknown on caller gone", setup: func(g *gatewaytest.Gateway) { g.Sim.SetLatency(3 * time.Second) },
			method: "POST", target: auditDel, body: auditBody, hdr: opsConfirmed(), callerGone: true,
			status: 499, lines: 1, caller: "ops", decision: "unknown", reason: "client_closed", number: "num_1001", order: "ord_5001"},

		// Refused by the handler: denied, with the IDs whenever the body is
		// a readable JSON object.
		denied(auditCase{name: "unidentified caller", method: "POST", target: auditDel, body: auditBody,
			hdr: []string{"X-Faxgate-Confirm", "num_1001"}}, 403, "unidentified", "unidentified_caller", "num_1001", "ord_5001"),
		denied(auditCase{name: "unidentified caller, wrong method", method: "GET", target: auditDel, body: auditBody},
			403, "unidentified", "unidentified_caller", "num_1001", "ord_5001"),
		denied(auditCase{name: "forbidden caller", method: "POST", target: auditDel, body: auditBody,
			hdr: []string{"X-Faxgate-Caller", "svc", "X-Faxgate-Confirm", "num_1001"}}, 403, "svc", "forbidden", "num_1001", "ord_5001"),
		denied(auditCase{name: "forbidden caller, other spelling", method: "POST", target: "/V1/Numbers/Delete/", body: auditBody,
			hdr: []string{"X-Faxgate-Caller", "svc"}}, 403, "svc", "forbidden", "num_1001", "ord_5001"),
		denied(auditCase{name: "wrong method", method: "GET", target: auditDel, body: auditBody, hdr: opsConfirmed()},
			405, "ops", "method_not_allowed", "num_1001", "ord_5001"),
		denied(auditCase{name: "wrong method, no body", method: "DELETE", target: auditDel, hdr: opsConfirmed()},
			405, "ops", "method_not_allowed", "", ""),
		denied(auditCase{name: "method the gateway does not forward", method: "PROPFIND", target: auditDel, body: auditBody, hdr: opsConfirmed()},
			405, "ops", "method_not_allowed", "num_1001", "ord_5001"),
		denied(auditCase{name: "missing confirmation", method: "POST", target: auditDel, body: auditBody,
			hdr: []string{"X-Faxgate-Caller", "ops"}}, 428, "ops", "confirmation_required", "num_1001", "ord_5001"),
		denied(auditCase{name: "wrong confirmation", method: "POST", target: auditDel, body: auditBody,
			hdr: []string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1002"}}, 428, "ops", "confirmation_required", "num_1001", "ord_5001"),
		denied(auditCase{name: "query string", method: "POST", target: auditDel + "?number_id=num_1002", body: auditBody, hdr: opsConfirmed()},
			400, "ops", "invalid_request", "num_1001", "ord_5001"),
		denied(auditCase{name: "not JSON", method: "POST", target: auditDel, body: "number_id=num_1001", hdr: opsConfirmed()},
			400, "ops", "invalid_request", "", ""),
		denied(auditCase{name: "JSON sent as a form", method: "POST", target: auditDel, body: auditBody,
			hdr: opsConfirmed("Content-Type", "application/x-www-form-urlencoded")}, 400, "ops", "invalid_request", "num_1001", "ord_5001"),
		denied(auditCase{name: "ambiguous duplicate key", method: "POST", target: auditDel, hdr: opsConfirmed(),
			body: `{"number_id":"num_1001","number_id":"num_1003"}`}, 400, "ops", "invalid_request", "num_1001,num_1003", ""),
		denied(auditCase{name: "confirmed body over the replay buffer", method: "POST", target: auditDel, hdr: opsConfirmed(),
			body: `{"number_id":"num_1001","pad":"` + big + `"}`}, 413, "ops", "body_too_large", "", ""),
		denied(auditCase{name: "slow's first delete, unconfirmed", method: "POST", target: auditDel, body: auditBody,
			hdr: []string{"X-Faxgate-Caller", "slow"}}, 428, "slow", "confirmation_required", "num_1001", "ord_5001"),
		denied(auditCase{name: "rate limited", method: "POST", target: auditDel, body: auditBody,
			hdr: []string{"X-Faxgate-Caller", "slow", "X-Faxgate-Confirm", "num_1001"}}, 429, "slow", "rate_limited", "num_1001", "ord_5001"),
		denied(auditCase{name: "body too large by Content-Length",
			raw: strings.Replace(rawDelete("HTTP/1.1", "ops", "X-Faxgate-Confirm: num_1001"), "Content-Length: 46", "Content-Length: 3000000", 1)},
			413, "ops", "body_too_large", "", ""),
		denied(auditCase{name: "chunked body over max_body_bytes", method: "POST", target: auditDel, hdr: opsConfirmed(),
			body: `{"number_id":"num_1001","pad":"` + strings.Repeat("x", 2<<20) + `"}`}, 413, "ops", "body_too_large", "", ""),
		denied(auditCase{name: "body slower than the read timeout", trickle: true,
			raw: strings.TrimSuffix(rawDelete("HTTP/1.1", "ops", "X-Faxgate-Confirm: num_1001"), auditBody) + auditBody[:10]},
			408, "ops", "request_timeout", "", ""),
		denied(auditCase{name: "framing refused", raw: strings.Replace(rawDelete("HTTP/1.1", "ops", "X-Faxgate-Confirm: num_1001",
			"Transfer-Encoding: chunked"), "Content-Length: 46", "Content-Length: 5", 1)}, 400, "ops", "invalid_request", "", ""),
		// Refused by the sniffer: the stand-in keeps the route, not the headers.
		denied(auditCase{name: "HTTP/2.0", raw: rawDelete("HTTP/2.0", "ops", "X-Faxgate-Confirm: num_1001")},
			505, "unidentified", "http_version_not_supported", "", ""),
		denied(auditCase{name: "HTTP/1.2", raw: rawDelete("HTTP/1.2", "ops", "X-Faxgate-Confirm: num_1001")},
			505, "unidentified", "http_version_not_supported", "", ""),
		denied(auditCase{name: "request line without a version", trickle: true, raw: "POST " + auditDel + "\r\n"},
			400, "unidentified", "invalid_request", "", ""),
		denied(auditCase{name: "head over 32 KiB", raw: rawDelete("HTTP/1.1", "ops", "X-Pad: "+strings.Repeat("p", 33<<10))},
			431, "unidentified", "headers_too_large", "", ""),
	}
	// Heads Go's server would refuse by itself before any handler: the
	// sniffer's stand-in keeps the route, not the headers.
	for _, d := range goRefusedDeletes() {
		cases = append(cases, denied(auditCase{name: "refused by Go's rules: " + d.name, raw: d.raw},
			d.status, "unidentified", d.code, "", ""))
	}
	return append(cases,
		// Paths that are no sensitive route's: no audit line.
		auditCase{name: "ambiguous spelling", method: "POST", target: "/v1/numbers/delete.json", body: auditBody, hdr: opsConfirmed(), status: 400},
		auditCase{name: "below the delete path", method: "POST", target: "/v1/numbers/delete/num_1001", body: auditBody, hdr: opsConfirmed(), status: 403},
		auditCase{name: "another route", method: "POST", target: "/v1/contacts/list", body: `{}`, hdr: []string{"X-Faxgate-Caller", "ops"}, status: 200},
	)
}

// TestAuditOneLinePerSensitiveRequest: exactly one audit line for every
// request whose path is a sensitive route's, with the decision, reason and
// IDs docs/logs.md gives (Audit lines), and none for other paths.
func TestAuditOneLinePerSensitiveRequest(t *testing.T) {
	var reset atomic.Bool
	g := gatewaytest.Start(t, gatewaytest.Options{Config: auditCallers, UpstreamTimeout: 500 * time.Millisecond,
		Wrap: func(sim http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == auditDel && reset.CompareAndSwap(true, false) {
					c, _, _ := http.NewResponseController(w).Hijack()
					_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
					c.Close()
					return
				}
				sim.ServeHTTP(w, r)
			})
		}})
	want := 0
	for _, tc := range auditCases(&reset) {
		t.Run(tc.name, func(t *testing.T) {
			g.Sim.Reset()
			reset.Store(false)
			if tc.setup != nil {
				tc.setup(g)
			}
			audits, access := len(g.LogLines("audit")), len(g.LogLines("request"))
			if got := sendAuditCase(t, g, tc); got != tc.status {
				t.Fatalf("status %d, want %d", got, tc.status)
			}
			want += tc.lines
			// The access line comes first, then the audit line, from the
			// same call once the answer is out: wait for both.
			lines := waitLines(t, g, access+1, audits+tc.lines)
			if len(lines) != audits+tc.lines {
				t.Fatalf("%d audit lines, want %d", len(lines)-audits, tc.lines)
			}
			if tc.lines == 0 {
				return
			}
			line := lines[len(lines)-1]
			for k, v := range map[string]any{"route": "numbers.delete", "caller": tc.caller, "decision": tc.decision,
				"reason": tc.reason, "status": float64(tc.status), "upstream_status": float64(tc.upstream),
				"number_id": tc.number, "order_id": tc.order} {
				if line[k] != v {
					t.Errorf("audit %s = %#v, want %#v; line %v", k, line[k], v, line)
				}
			}
			if id, _ := line["request_id"].(string); id == "" {
				t.Errorf("audit line without request_id: %v", line)
			}
			for _, k := range []string{"body", "query", "authorization", "token"} {
				if _, ok := line[k]; ok {
					t.Errorf("audit line has a %s field: %v", k, line)
				}
			}
		})
	}
	if got := len(g.LogLines("audit")); got != want {
		t.Fatalf("%d audit lines in all, want %d", got, want)
	}
}

// sendAuditCase sends tc and returns the status the caller got (499 when
// it gave up).
func sendAuditCase(t *testing.T, g *gatewaytest.Gateway, tc auditCase) int {
	t.Helper()
	if tc.raw != "" {
		c, err := net.Dial("tcp", g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		go func() { _, _ = io.WriteString(c, tc.raw) }() // the server may stop reading early
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ctx := context.Background()
	if tc.callerGone {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
	}
	var body io.Reader = http.NoBody
	if tc.body != "" {
		body = strings.NewReader(tc.body)
		if strings.Contains(tc.name, "chunked") {
			body = io.MultiReader(body) // unknown length: sent chunked
		}
	}
	req, err := http.NewRequestWithContext(ctx, tc.method, g.URL+tc.target, body)
	if err != nil {
		t.Fatal(err)
	}
	if tc.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(tc.hdr); i += 2 {
		if k := http.CanonicalHeaderKey(tc.hdr[i]); !seen[k] {
			seen[k] = true
			req.Header.Del(k)
		}
		req.Header.Add(tc.hdr[i], tc.hdr[i+1])
	}
	resp, err := g.Client.Do(req)
	if tc.callerGone {
		if err == nil {
			resp.Body.Close()
			t.Fatalf("the caller got an answer (%d) before it gave up", resp.StatusCode)
		}
		return 499
	}
	if err != nil {
		t.Fatalf("%s %s: %v", tc.method, tc.target, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitLines waits until the log holds access access lines and at least
// audits audit lines, and no request is in flight, then returns the audit
// lines. A request's access and audit lines are written by one call before
// its handler returns (faxgate_inflight_requests falls after them), so once
// none is in flight no audit line can still be coming.
func waitLines(t *testing.T, g *gatewaytest.Gateway, access, audits int) []map[string]any {
	t.Helper()
	eventually.EventuallyErr(t, 5*time.Second, "the access and audit lines", func() error {
		gotAccess, gotAudits := len(g.LogLines("request")), len(g.LogLines("audit"))
		inflight := testutil.ToFloat64(g.Metrics.Proxy.Inflight)
		if gotAccess < access || gotAudits < audits || inflight != 0 {
			return fmt.Errorf("%d access lines (want %d), %d audit lines (want at least %d), %v requests in flight",
				gotAccess, access, gotAudits, audits, inflight)
		}
		return nil
	})
	return g.LogLines("audit")
}

// TestAuditTokenUnavailableIsDenied: without a token the request never
// leaves the gateway, so the delete is denied, not unknown.
func TestAuditTokenUnavailableIsDenied(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: auditCallers + "token:\n  retry_min: 1h\n  retry_max: 2h\n",
		SimKey: "another-key", NoWait: true})
	resp, body := g.Do(t, "POST", auditDel, auditBody, opsConfirmed()...)
	wantEnvelope(t, resp, body, 503, "token_unavailable")
	lines := waitLines(t, g, 1, 1)
	if len(lines) != 1 {
		t.Fatalf("%d audit lines, want 1", len(lines))
	}
	if l := lines[0]; l["decision"] != "denied" || l["reason"] != "token_unavailable" || l["number_id"] != "num_1001" {
		t.Fatalf("audit line = %v", l)
	}
	if n := g.Sim.RouteCounts()["POST "+auditDel]; n != 0 {
		t.Fatalf("the upstream counted %d deletes", n)
	}
}

// TestAuditNeverHoldsTheToken: a caller that knows the token cannot have
// it written into the audit line through number_id or order_id, whole or
// split between the two, and a huge ID is shortened.
func TestAuditNeverHoldsTheToken(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: auditCallers})
	tok := g.Tokens.Current().Value.Reveal()
	half := len(tok) / 2
	for i, body := range []string{
		fmt.Sprintf(`{"number_id":"x%sx","order_id":"ord_1"}`, tok),
		fmt.Sprintf(`{"number_id":"%s","order_id":"%s"}`, tok[:half], tok[half:]),
		fmt.Sprintf(`{"number_id":"num_1","order_id":"%s"}`, strings.Repeat("o", 10000)),
	} {
		g.Do(t, "POST", auditDel, body, "X-Faxgate-Caller", "svc")
		lines := waitLines(t, g, i+1, i+1)
		if len(lines) != i+1 {
			t.Fatalf("%d audit lines, want %d", len(lines), i+1)
		}
		line := lines[i]
		switch i {
		case 0, 1:
			if line["number_id"] != "[redacted]" || line["order_id"] != "[redacted]" {
				t.Errorf("body %d: IDs %q %q, want both redacted", i, line["number_id"], line["order_id"])
			}
		case 2:
			if o, _ := line["order_id"].(string); len(o) > 300 || !strings.HasSuffix(o, "[truncated]") || line["number_id"] != "num_1" {
				t.Errorf("long order_id logged as %d bytes: %.80q", len(o), o)
			}
		}
	}
	if strings.Contains(g.Logs(), tok) || strings.Contains(g.Logs(), tok[:half]) {
		t.Fatal("the token, or half of it, is in the logs")
	}
}

// TestAuditLinesSurviveErrorLevel: with log.level: error the access line is
// gone, the audit line written through Options.AuditLogger is not; without
// an AuditLogger the audit line goes through Logger.Named("audit").
func TestAuditLinesSurviveErrorLevel(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"status":1,"message":"ok"}`)
	}))
	t.Cleanup(up.Close)
	cfg, err := config.Parse([]byte(`
upstream:
  base_url: "`+up.URL+`"
  api_key_env: K
log:
  level: error
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
`), func(string) (string, bool) { return "k", true })
	if err != nil {
		t.Fatal(err)
	}
	rules, err := policy.Compile(cfg.RuleSections(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(up.URL)
	tok := tokencache.NewToken(tokencache.NewSecret("audit-test-token-0123456789"), time.Now(), time.Hour, false)
	newLogger := func(buf *gatewaytest.SyncBuffer, lvl zapcore.Level) *zap.Logger {
		return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(buf), lvl))
	}
	level, _ := zapcore.ParseLevel(cfg.Log.Level)
	for _, withAudit := range []bool{true, false} {
		var logs, audits gatewaytest.SyncBuffer
		o := proxy.Options{Upstream: base, Transport: http.DefaultTransport, Tokens: fixedToken{tok}, Rules: rules,
			MaxBodyBytes: cfg.Server.MaxBodyBytes, ResendBufferBytes: cfg.Server.ResendBufferBytes, ReadTimeout: cfg.Server.ReadTimeout, UpstreamTimeout: cfg.Upstream.Timeout,
			Metrics: proxy.NewMetrics(prometheus.NewRegistry()), Logger: newLogger(&logs, level)}
		if withAudit {
			o.AuditLogger = newLogger(&audits, zapcore.InfoLevel).Named("audit")
		} else {
			o.Logger = newLogger(&logs, zapcore.InfoLevel)
		}
		srv := httptest.NewServer(proxy.New(o))
		resp, err := http.Post(srv.URL+auditDel, "application/json", strings.NewReader(auditBody))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != 403 {
			t.Fatalf("status %d, want 403", resp.StatusCode)
		}
		if withAudit {
			if strings.Contains(logs.String(), `"msg":"request"`) || strings.Contains(logs.String(), `"msg":"audit"`) {
				t.Fatalf("at error level the logger wrote: %s", logs.String())
			}
			if !strings.Contains(audits.String(), `"msg":"audit"`) || !strings.Contains(audits.String(), `"decision":"denied"`) ||
				!strings.Contains(audits.String(), `"number_id":"num_1001"`) {
				t.Fatalf("no audit line at error level: %q", audits.String())
			}
		} else if !strings.Contains(logs.String(), `"logger":"audit","msg":"audit"`) {
			t.Fatalf("without an AuditLogger, no audit line through Logger: %q", logs.String())
		}
	}
}
