package proxy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/tlstest"
	"github.com/faxgate/faxgate/tokencache"
)

// seenTokens records every Bearer token the upstream received, so the
// checks cover tokens that replaced the first one (after a 401).
type seenTokens struct{ sync.Map }

func (s *seenTokens) add(tok string) {
	if tok != "" {
		s.Store(tok, true)
	}
}

func (s *seenTokens) list() (out []string) {
	s.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	return out
}

// echoUpstream wraps faxsim with routes under /v1/echo/ (unmatched routes
// for the gateway, so forwarded) that hand the received Authorization value
// back in every place a response can carry it.
func echoUpstream(seen *seenTokens) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			auth := r.Header.Get("Authorization")
			tok := strings.TrimPrefix(auth, "Bearer ")
			if r.URL.Path != "/v1/auth" {
				seen.add(tok)
			}
			h := w.Header()
			switch r.URL.Path {
			case "/v1/echo/headers":
				h.Set("X-Echo-Auth", auth)
				h.Add("Set-Cookie", "upstream_session="+tok+"; Path=/; HttpOnly")
				h.Set("X-Harmless", "kept")
				h.Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"status":1,"message":"echo","data":{"auth":%q}}`, auth)
			case "/v1/echo/early-hints":
				h.Set("Link", "</static/app.js?t="+tok+">; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				h.Del("Link")
				fmt.Fprint(w, `{"status":1,"message":"ok"}`)
			case "/v1/echo/trailers":
				h.Set("Trailer", "X-Echo-Trailer")
				fmt.Fprint(w, `{"status":1,"message":"ok"}`)
				w.(http.Flusher).Flush()
				h.Set("X-Echo-Trailer", auth)
				h.Set(http.TrailerPrefix+"X-Undeclared-Echo", auth)
			case "/v1/echo/names":
				// The token in a header's name and in a declared trailer's
				// name; the gateway's parser canonicalizes both, changing
				// their case.
				c, bw, err := http.NewResponseController(w).Hijack()
				if err == nil {
					// Connection: close, or the gateway could reuse the
					// connection this handler closes for the next request.
					fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\nX-Echo-%s: 1\r\n"+
						"Trailer: X-Trailer-%s, X-Fine\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"+
						"X-Trailer-%s: 1\r\nX-Fine: kept\r\n\r\n", tok, tok, tok)
					_ = bw.Flush()
					_ = c.Close()
				}
			case "/v1/echo/unauthorized":
				h.Set("WWW-Authenticate", `Bearer realm="api", error="invalid_token", token="`+tok+`"`)
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprintf(w, `{"status":0,"message":"token %s rejected"}`, tok)
			case "/v1/echo/500", "/v1/echo/502":
				code := map[string]int{"/v1/echo/500": 500, "/v1/echo/502": 502}[r.URL.Path]
				w.WriteHeader(code)
				fmt.Fprintf(w, `{"status":0,"message":"internal error for %s"}`, auth)
			case "/v1/echo/slow":
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			case "/v1/echo/hangup":
				c, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					c.Close()
				}
			default:
				next.ServeHTTP(w, r)
			}
		})
	}
}

// answer is one response as the caller saw it.
type answer struct {
	name    string
	head    string // status line, headers and trailers (or the whole exchange, for raw TCP)
	body    string
	relayed bool // the body is the upstream's own, relayed unchanged (docs/callers-and-policy.md)
}

func record(name string, resp *http.Response, body string, relayed bool) answer {
	var b bytes.Buffer
	b.WriteString(resp.Proto + " " + resp.Status + "\n")
	_ = resp.Header.Write(&b)
	_ = resp.Trailer.Write(&b)
	return answer{name: name, head: b.String(), body: body, relayed: relayed}
}

// forbiddenStrings are the renderings of the key and of each token that must
// never leave the gateway's hands.
func forbiddenStrings(tokens []string) []string {
	out := []string{gatewaytest.Key, base64.StdEncoding.EncodeToString([]byte(gatewaytest.Key))}
	for _, t := range tokens {
		out = append(out, t, base64.StdEncoding.EncodeToString([]byte(gatewaytest.Key+":"+t)))
	}
	return out
}

// assertNothingLeaked checks the logs, the full /metrics exposition and
// every answer. Only bodies the upstream wrote may carry what it put there.
func assertNothingLeaked(t *testing.T, g *gatewaytest.Gateway, answers []answer, tokens []string) {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(g.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	exposition := rec.Body.String()
	if !strings.Contains(exposition, "faxgate_requests_total") {
		t.Fatalf("metrics exposition looks empty:\n%s", exposition)
	}
	logs := g.Logs()
	for _, s := range forbiddenStrings(tokens) {
		if strings.Contains(logs, s) {
			t.Errorf("the logs hold a secret (%.12s...):\n%s", s, grepLines(logs, s))
		}
		if strings.Contains(exposition, s) {
			t.Errorf("the metrics hold a secret (%.12s...):\n%s", s, grepLines(exposition, s))
		}
		for _, a := range answers {
			if strings.Contains(a.head, s) {
				t.Errorf("%s: response head holds a secret (%.12s...):\n%s", a.name, s, a.head)
			}
			if !a.relayed && strings.Contains(a.body, s) {
				t.Errorf("%s: gateway-made body holds a secret (%.12s...): %s", a.name, s, a.body)
			}
		}
	}
	// docs/logs.md, What is never logged: no query string, request body or Authorization value.
	for _, s := range []string{"Bearer ", "Basic ", "api_secret_key", "token=", "qmarker", "body-fragment-7c1e"} {
		if strings.Contains(logs, s) {
			t.Errorf("the logs hold %q:\n%s", s, grepLines(logs, s))
		}
	}
}

func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestNoSecretInLogsMetricsOrResponses(t *testing.T) {
	noSecretInLogsMetricsOrResponses(t, nil)
}

// TestNoSecretInLogsMetricsOrResponsesOverTLS: the same over TLS, with h2
// and with HTTP/1.1 (the raw cases), and no certificate or key body in any
// log line either (docs/logs.md, What is never logged).
func TestNoSecretInLogsMetricsOrResponsesOverTLS(t *testing.T) {
	for _, h1 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2", true: "http1"}[h1], func(t *testing.T) {
			ca := tlstest.NewCA(t, "leak CA")
			pair := ca.Server(t, "faxgate.test")
			cert, key := pair.WriteFiles(t, t.TempDir())
			g := noSecretInLogsMetricsOrResponses(t, &gatewaytest.TLS{CertFile: cert, KeyFile: key, RootCAs: ca.Pool(), HTTP1: h1})
			logs := g.Logs()
			if strings.Contains(logs, "-----BEGIN") || strings.Contains(logs, "PRIVATE KEY") {
				t.Errorf("a log line holds PEM")
			}
			for _, b := range [][]byte{pair.CertPEM, pair.KeyPEM} {
				for _, line := range strings.Split(string(b), "\n") {
					if len(line) > 20 && !strings.HasPrefix(line, "-----") && strings.Contains(logs, line) {
						t.Errorf("a log line holds a certificate or key body line:\n%s", grepLines(logs, line))
					}
				}
			}
		})
	}
}

func noSecretInLogsMetricsOrResponses(t *testing.T, tlsOpts *gatewaytest.TLS) *gatewaytest.Gateway {
	seen := &seenTokens{}
	g := gatewaytest.Start(t, gatewaytest.Options{
		Config:          openCallers + "server:\n  max_body_bytes: 65536\n",
		UpstreamTimeout: time.Second,
		Wrap:            echoUpstream(seen),
		TLS:             tlsOpts,
	})
	h2 := tlsOpts != nil && !tlsOpts.HTTP1
	tok0, err := g.Tokens.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tok, key := tok0.Value.Reveal(), gatewaytest.Key
	seen.add(tok)
	if !regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`).MatchString(tok) {
		t.Fatalf("the simulator's token %d chars is no valid X-Request-Id; the request-id case below would test nothing", len(tok))
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(key+":"+tok))
	// Every header a caller can put the secrets in.
	carry := []string{
		"Authorization", "Bearer " + tok,
		"Authorization", basic,
		"Proxy-Authorization", basic,
		"Cookie", "session=" + tok + "; api_key=" + key,
		"X-Api-Key", key,
		"X-Custom-Secret", tok + " " + key,
		"X-Faxgate-Caller", tok, // not a configured value: the caller stays svc by address
		"X-Faxgate-Confirm", tok,
		"X-Request-Id", "not valid " + tok,
	}
	withID := func(id string) []string {
		h := append([]string(nil), carry[:len(carry)-2]...)
		return append(h, "X-Request-Id", id)
	}
	secretBody := fmt.Sprintf(`{"api_secret_key":%q,"token":%q,"marker":"body-fragment-7c1e"}`, key, tok)
	query := "?api_secret_key=" + key + "&token=" + tok + "&qmarker=1"
	deleteBody := fmt.Sprintf(`{"number_id":%q,"order_id":"ord_5001"}`, tok)

	var answers []answer
	for _, c := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int    // 0: whatever the upstream says
		code                     string // the gateway's error code, when it answers
	}{
		{"allowed route", "POST", "/v1/contacts/list" + query, secretBody, carry, 0, ""},
		{"allowed GET", "GET", "/v1/esign_templates" + query, "", carry, 200, ""},
		{"request id equal to the token", "POST", "/v1/contacts/list", `{}`, withID(tok), 200, ""},
		{"request id holding the token", "POST", "/v1/contacts/list", `{}`, withID("id-" + tok + "-x"), 200, ""},
		{"request id equal to the token, refused", "GET", "/nope", "", withID(tok), 404, "unknown_route"},
		{"token in an unmatched path", "POST", "/v1/" + tok + query, secretBody, carry, 404, ""},
		{"key in an unmatched path", "POST", "/v1/contacts/" + key, secretBody, carry, 404, ""},
		{"token outside /v1", "GET", "/" + tok + query, "", carry, 404, "unknown_route"},
		{"ambiguous path", "POST", "/v1/contacts/list%2F" + tok + query, secretBody, carry, 400, "invalid_path"},
		{"_method query", "POST", "/v1/contacts/list?_method=DELETE&token=" + tok, secretBody, carry, 400, "invalid_request"},
		{"sensitive route, not granted", "POST", "/v1/numbers/delete" + query, deleteBody, carry, 403, "forbidden"},
		{"token as number_id, unconfirmed", "POST", "/v1/numbers/delete", deleteBody,
			[]string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", "num_1001", "Authorization", "Bearer " + tok}, 428, "confirmation_required"},
		{"token as number_id, confirmed", "POST", "/v1/numbers/delete", deleteBody,
			[]string{"X-Faxgate-Caller", "ops", "X-Faxgate-Confirm", tok, "Authorization", "Bearer " + tok}, 0, ""},
		{"body too large", "POST", "/v1/contacts/list" + query, strings.Repeat(secretBody, 1000), carry, 413, "body_too_large"},
		{"headers too large", "POST", "/v1/contacts/list" + query, secretBody,
			append(carry, "X-Big", strings.Repeat(tok, 1000)), 431, "headers_too_large"},
		{"upgrade", "GET", "/v1/esign_templates" + query, "", append(carry, "Connection", "Upgrade", "Upgrade", tok), 200, ""},
		{"method not allowed", "PUT", "/v1/contacts/list" + query, secretBody, carry, 405, "method_not_allowed"},
		{"auth endpoint", "POST", "/v1/auth" + query, fmt.Sprintf(`{"api_secret_key":%q}`, key), carry, 403, "auth_managed"},
		// Upstream side: the response headers echoing the token are dropped,
		// the rest of the answer relayed.
		{"upstream echoes the token in headers", "POST", "/v1/echo/headers", `{}`, nil, 200, ""},
		{"upstream 500 with the token in its body", "POST", "/v1/echo/500", `{}`, nil, 500, ""},
		{"upstream 502 with the token in its body", "POST", "/v1/echo/502", `{}`, nil, 502, ""},
		{"upstream timeout", "POST", "/v1/echo/slow" + query, secretBody, carry, 504, "upstream_timeout"},
		{"upstream hangs up", "POST", "/v1/echo/hangup" + query, secretBody, carry, 502, "upstream_unavailable"},
	} {
		if h2 && c.name == "upgrade" {
			continue // Connection: Upgrade has no h2 form; Go's client refuses to send it
		}
		resp, body := g.Do(t, c.method, c.path, c.body, c.hdr...)
		if c.status != 0 && resp.StatusCode != c.status {
			t.Errorf("%s: status = %d, want %d: %s", c.name, resp.StatusCode, c.status, body)
		}
		if c.code != "" {
			if _, _, code := gatewaytest.Envelope(t, body); code != c.code {
				t.Errorf("%s: error = %q, want %q", c.name, code, c.code)
			}
		}
		relayed := strings.HasPrefix(c.path, "/v1/echo/") && c.code == ""
		if relayed && (!strings.HasPrefix(body, `{"status":`) || strings.Contains(body, `"error"`)) {
			t.Errorf("%s: the upstream's body was not relayed: %s", c.name, body)
		}
		answers = append(answers, record(c.name, resp, body, relayed))
	}
	var echo answer
	for _, a := range answers {
		if a.name == "upstream echoes the token in headers" {
			echo = a
		}
	}
	if !strings.Contains(echo.head, "X-Harmless: kept") || strings.Contains(echo.head, "X-Echo-Auth") || strings.Contains(echo.head, "upstream_session") {
		t.Errorf("header echo: want X-Echo-Auth and Set-Cookie dropped, X-Harmless kept:\n%s", echo.head)
	}
	// Bodies are relayed unchanged (docs/callers-and-policy.md): what an upstream puts
	// in its own body is its doing, so the echo body still holds the token.
	if !strings.Contains(echo.body, tok) {
		t.Errorf("echo body was altered: %s", echo.body)
	}

	// Raw TCP, for what a Go client hides: 1xx answers, trailers, unknown methods.
	for _, c := range []struct{ name, raw, want string }{
		{"early hints echoing the token", "POST /v1/echo/early-hints HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", "HTTP/1.1 200 "},
		{"trailers echoing the token", "POST /v1/echo/trailers HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", "HTTP/1.1 200 "},
		{"header and trailer names holding the token", "POST /v1/echo/names HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", "HTTP/1.1 200 "},
		{"unknown method", "PROPFIND /v1/" + tok + query + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\nX-Request-Id: " + tok + "\r\nConnection: close\r\n\r\n", "HTTP/1.1 405 "},
	} {
		out := g.Raw(t, c.raw, 3*time.Second)
		_, final, _ := strings.Cut(out, c.want)
		if final == "" || !strings.Contains(final, "X-Request-Id: ") {
			t.Errorf("%s: answer = %q, want %q with an X-Request-Id", c.name, out, c.want)
		}
		if strings.Contains(c.name, "names") {
			// A canonicalized name holds the token in another case.
			if strings.Contains(strings.ToLower(out), strings.ToLower(tok)) {
				t.Errorf("%s: the token reached the caller:\n%s", c.name, out)
			}
			if !strings.Contains(out, "X-Fine: kept") {
				t.Errorf("%s: the harmless trailer was lost:\n%s", c.name, out)
			}
		}
		answers = append(answers, answer{name: c.name, head: out})
	}

	// Last, because the 401 makes the gateway renew: from here on the token
	// above is no longer the current one, which is the only one the gateway
	// recognises in request IDs and response headers (docs/security.md).
	resp, body := g.Do(t, "POST", "/v1/echo/unauthorized"+query, secretBody, carry...)
	if resp.StatusCode != 401 || !strings.Contains(body, "rejected") {
		t.Errorf("upstream 401: %d %s, want it relayed", resp.StatusCode, body)
	}
	if strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Errorf("WWW-Authenticate echoing the renewed token was relayed: %v", resp.Header)
	}
	answers = append(answers, record("upstream 401 echoing the token", resp, body, true))

	final, err := g.Tokens.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seen.add(final.Value.Reveal())
	tokens := seen.list()
	if len(tokens) < 2 {
		t.Fatalf("tokens seen = %d, want the first and the one renewed after the 401", len(tokens))
	}
	if n := len(g.LogLines("request")); n < len(answers) {
		t.Errorf("access lines = %d, want at least %d: a request went unlogged, the log check saw too little", n, len(answers))
	}
	assertNothingLeaked(t, g, answers, tokens)
	return g
}

func TestNoSecretWhenTheKeyIsRejectedOrTheAuthShimAnswers(t *testing.T) {
	t.Run("key rejected", func(t *testing.T) {
		g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + "token:\n  retry_min: 10ms\n  retry_max: 20ms\n",
			SimKey: "another-key", NoWait: true})
		eventually.Eventually(t, 5*time.Second, "3 invalid_key renewals counted", func() bool {
			return testutil.ToFloat64(g.Metrics.Tokens.Refresh.WithLabelValues("invalid_key")) >= 3
		})
		// The request path does not hold the key, so it cannot recognise it
		// in a well-formed X-Request-Id the way it does the token: the key
		// goes in an invalid one here, which is replaced.
		resp, body := g.Do(t, "POST", "/v1/contacts/list?api_secret_key="+gatewaytest.Key, `{"api_secret_key":"`+gatewaytest.Key+`"}`,
			"X-Api-Key", gatewaytest.Key, "X-Request-Id", gatewaytest.Key+" !")
		wantEnvelope(t, resp, body, 503, "token_unavailable")
		if !strings.Contains(g.Logs(), "upstream rejected the API secret key") {
			t.Fatalf("the rejection was not logged:\n%s", g.Logs())
		}
		assertNothingLeaked(t, g, []answer{record("503", resp, body, false)}, nil)
	})
	t.Run("auth shim", func(t *testing.T) {
		g := gatewaytest.Start(t, gatewaytest.Options{Config: openCallers + "policy:\n  auth_endpoint: shim\n"})
		tok, err := g.Tokens.Token(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		resp, body := g.Do(t, "POST", "/v1/auth?api_secret_key="+gatewaytest.Key, `{"api_secret_key":"`+gatewaytest.Key+`"}`,
			"Authorization", "Bearer "+tok.Value.Reveal(), "X-Request-Id", tok.Value.Reveal())
		if resp.StatusCode != 200 || !strings.Contains(body, "faxgate-managed") {
			t.Fatalf("shim: %d %s", resp.StatusCode, body)
		}
		assertNothingLeaked(t, g, []answer{record("shim", resp, body, false)}, []string{tok.Value.Reveal()})
	})
}

// TestTokenNeverPrintsItself: Token's unexported header field holds
// "Bearer <token>", and fmt prints unexported fields.
func TestTokenNeverPrintsItself(t *testing.T) {
	const v = "tok_SUPERSECRET_abc123"
	tp := tokencache.NewToken(tokencache.NewSecret(v), time.Unix(1700000000, 0), time.Hour, false)
	holder := struct {
		Tok  tokencache.Token
		Ptr  *tokencache.Token
		List []*tokencache.Token
	}{*tp, tp, []*tokencache.Token{tp}}
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		outs = append(outs, fmt.Sprintf(verb, tp), fmt.Sprintf(verb, *tp), fmt.Sprintf(verb, holder))
	}
	outs = append(outs, fmt.Sprint(tp), fmt.Sprintln(*tp, holder))
	for _, x := range []any{tp, *tp, holder} {
		j, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, string(j))
	}
	var buf bytes.Buffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.DebugLevel))
	log.Debug("x", zap.Any("ptr", tp), zap.Any("val", *tp), zap.Reflect("refl", holder), zap.Any("holder", holder),
		zap.Stringer("str", tp), zap.String("sprint", fmt.Sprint(tp)))
	console := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(&buf), zapcore.DebugLevel))
	console.Debug("x", zap.Any("ptr", tp), zap.Any("val", *tp), zap.Reflect("refl", holder))
	outs = append(outs, buf.String())
	for _, o := range outs {
		if strings.Contains(o, v) || strings.Contains(o, fmt.Sprintf("%x", v)) {
			t.Fatalf("token printed: %s", o)
		}
	}
	if !strings.Contains(buf.String(), "[redacted]") {
		t.Fatalf("zap output lacks [redacted]: %s", buf.String())
	}
	if tp.Header() != "Bearer "+v {
		t.Fatalf("Header() = %q, the redaction broke the header", tp.Header())
	}
}

// TestMetricLabelsAreFromFixedSets drives requests whose paths, IDs, methods,
// request IDs and source addresses vary, then checks every label value of
// every series against the closed sets of docs/metrics-and-alerts.md.
func TestMetricLabelsAreFromFixedSets(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
callers:
  trusted_proxies: ["127.0.0.1/32"]
  list:
    - name: svc
      cidrs: ["127.0.0.1/32"]
      allow: ["*"]
    - name: ops
      header_values: ["ops"]
      allow: ["*", "numbers.delete"]
    - name: slow
      cidrs: ["127.0.0.3/32"]
      allow: ["contacts.*"]
      rate_limit: { rps: 0.001, burst: 1 }
rate_limit:
  default: { rps: 1000, burst: 1000 }
routes:
  extra:
    - { name: faxes.send, method: POST, path: /v1/faxes/send }
`})
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		tr := &http.Transport{DialContext: d.DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	clients := []*http.Client{g.Client, from("127.0.0.2"), from("127.0.0.3")}
	paths := []string{
		"/v1/contacts/list", "/V1/CONTACTS/LIST/", "/v1/contacts/list?id=12345&phone=%2B15551234567",
		"/v1/esign_templates/tpl_1/theme", "/v1/esign_templates/tpl_98765/field_rule",
		"/v1/esign_templates/tpl_1/fields/fld_42", "/v1/esign_templates/tpl_1/fields",
		"/v1/faxes/abc123", "/v1/faxes/15551234567", "/v1/numbers/num_1001", "/v1/faxes/send",
		"/v1/numbers/delete", "/v1/auth", "/admin/127.0.0.1", "/v1/x%20y", "/v1/a/../b", "/v1//z", "/",
	}
	n := 0
	for _, p := range paths {
		for _, m := range []string{"GET", "POST", "PATCH", "PUT", "DELETE", "OPTIONS"} {
			for ci, c := range clients {
				n++
				req, _ := http.NewRequest(m, g.URL+p, strings.NewReader(`{"number_id":"num_1001"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-Id", fmt.Sprintf("req-%d-%s", n, strings.Repeat("z", n%7)))
				if v := []string{"ops", "nobody", "10.1.2.3", ""}[n/3%4]; v != "" {
					req.Header.Set("X-Faxgate-Caller", v)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("client %d %s %s: %v", ci, m, p, err)
				}
				resp.Body.Close()
			}
		}
	}
	for _, raw := range []string{
		"PROPFIND /v1/contacts/list HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"get /v1/contacts/list HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"X-CUSTOM-99 /v1/faxes/abc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"GET http://evil.example/v1/contacts/list HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
	} {
		if out := g.Raw(t, raw, 3*time.Second); !strings.HasPrefix(out, "HTTP/1.1 4") {
			t.Fatalf("%q: answer %q, want a 4xx", raw, out)
		}
	}
	g.Sim.RevokeTokens() // an upstream 401 and its retry
	if resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`); resp.StatusCode != 200 {
		t.Fatalf("after revocation: %d", resp.StatusCode)
	}
	g.Sim.FailNext(1, 503)
	g.Do(t, "POST", "/v1/faxes/xyz789", `{}`)

	allowed := map[string]map[string]bool{
		"caller": set("unidentified"),
		"route":  set("unmatched", "none"),
		"method": set("GET", "POST", "PATCH", "PUT", "DELETE", "other"),
		"reason": set("invalid_path", "invalid_request", "unidentified_caller", "forbidden", "auth_managed", "unknown_route", "request_timeout", "method_not_allowed", "body_too_large", "confirmation_required", "headers_too_large", "rate_limited", "upstream_unavailable", "token_unavailable", "upstream_timeout", "http_version_not_supported",
			"unsent", "reset", "throttled", "unreachable", "auth", "refused"),
		"result":    set("ok", "error", "invalid_key"),
		"version":   set("test"),
		"goversion": set(runtime.Version()),
	}
	for _, c := range g.Config.Callers.List {
		allowed["caller"][c.Name] = true
	}
	for _, r := range append(config.BuiltinRoutes(), g.Config.Routes.Extra...) {
		allowed["route"][r.Name] = true
	}
	code := regexp.MustCompile(`^([1-5][0-9][0-9]|other)$`)
	fixedWord := regexp.MustCompile(`^[a-z][a-z_]{0,31}$`)
	mfs, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				name, val := lp.GetName(), lp.GetValue()
				used[name+"="+val] = true
				var ok bool
				switch {
				case name == "code":
					ok = code.MatchString(val)
				case name == "result" && mf.GetName() != "faxgate_token_refresh_total",
					allowed[name] == nil:
					// A label the metrics table does not name (more may be
					// added): its values must still be fixed words.
					ok = fixedWord.MatchString(val)
				default:
					ok = allowed[name][val]
				}
				if !ok {
					t.Errorf("%s{%s=%q}: value outside the documented fixed sets", mf.GetName(), name, val)
				}
			}
		}
	}
	// The traffic above must have exercised every kind of value, or the test proves little.
	for _, want := range []string{"caller=unidentified", "caller=svc", "caller=ops", "caller=slow",
		"route=unmatched", "route=none", "route=faxes.send", "route=esign.theme.delete", "route=auth",
		"method=other", "code=405", "code=503", "reason=rate_limited", "reason=unidentified_caller",
		"reason=invalid_path", "reason=unknown_route", "reason=forbidden", "reason=method_not_allowed"} {
		if !used[want] {
			t.Errorf("no series with %s: the traffic did not cover it", want)
		}
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.Upstream401Retries.WithLabelValues("contacts.list")); got != 1 {
		t.Errorf("401 retries = %v, want 1", got)
	}
}

func set(vs ...string) map[string]bool {
	m := map[string]bool{}
	for _, v := range vs {
		m[v] = true
	}
	return m
}
