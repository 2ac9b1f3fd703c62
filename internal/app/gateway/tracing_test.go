package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/app/gateway"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/otlptest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// traceCallers: svc by address, every route but the sensitive ones.
const traceCallers = `
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
rate_limit:
  default: { rps: 100000, burst: 100000 }
`

func tracingYAML(endpoint string, ratio float64) string {
	return fmt.Sprintf("tracing:\n  endpoint: %q\n  sample_ratio: %g\n  service_name: faxgate-test\n", endpoint, ratio)
}

// Canaries: values a caller sends that must never reach a span.
const (
	canaryQuery  = "QueryCanary-7f3a"
	canaryBody   = "BodyCanary-19c2"
	canaryAuth   = "AuthCanary-55d0"
	canaryKey    = "ApiKeyHeaderCanary-a1b2"
	canaryCookie = "CookieCanary-c3d4"
)

func byName(spans []otlptest.Span, name string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func children(spans []otlptest.Span, parent otlptest.Span) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.TraceID == parent.TraceID && s.ParentSpanID == parent.SpanID {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

func wantAttrs(t *testing.T, s otlptest.Span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := s.Attrs[k]; !ok || got != v {
			t.Errorf("span %q: %s = %q (present %v), want %q; attrs %v", s.Name, k, got, ok, v, s.Attrs)
		}
	}
}

// TestTracingSpanTree: a request through a gateway sharing its rate limit
// and token through Redis makes a SERVER span with the semantic-convention
// and faxgate attributes, a CLIENT child whose context is the traceparent
// the upstream got, a Redis decision child, and a renewal trace of its own;
// the log lines carry its IDs; and no secret reaches the collector.
func TestTracingSpanTree(t *testing.T) {
	col := otlptest.Start(t, otlptest.Accept)
	const redisPassword = "RedisPassword-Canary-9e8d"
	rs := redistest.Start(t, "--requirepass", redisPassword)
	const collectorAuth = "Bearer collector-Secret-42"
	const budget = "upstream_budget:\n  limits:\n    - { name: tenant, scope: tenant, requests: 100000, per: 24h }\n"
	g := gatewaytest.Start(t, gatewaytest.Options{Config: traceCallers + budget + tracingYAML(col.URL, 1) + "  headers_env: OTLP_HEADERS\n",
		RedisAddr: rs.Addr, RateLimitRedisAddr: rs.Addr, RateLimitTimeout: 2 * time.Second, RedisPassword: redisPassword,
		Env: map[string]string{"OTLP_HEADERS": "Authorization=Bearer%20collector-Secret-42,X-Scope-OrgID=team-a"}})
	token := g.Tokens.Current().Value.Reveal()

	resp, body := g.Do(t, "POST", "/v1/contacts/create?secret="+canaryQuery,
		`{"first_name":"`+canaryBody+`","last_name":"L","type":"individual"}`,
		"Content-Type", "application/json", "Authorization", "Bearer "+canaryAuth,
		"X-Api-Key", canaryKey, "Cookie", "session="+canaryCookie)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// A denied request to a sensitive route: faxgate.error and faxgate.decision.
	resp, _ = g.Do(t, "POST", "/v1/numbers/delete", `{"number_id":"n1"}`, "Content-Type", "application/json")
	if resp.StatusCode != 403 {
		t.Fatalf("numbers.delete: status %d, want 403", resp.StatusCode)
	}
	// Redis gone: the decision is made locally, and the span says so.
	rs.Kill()
	if resp, body = g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json"); resp.StatusCode != 200 {
		t.Fatalf("contacts.list without Redis: %d %s", resp.StatusCode, body)
	}
	rec := g.Sim.Requests()
	var upstreamTP string
	for _, r := range rec {
		if r.Path == "/v1/contacts/create" {
			upstreamTP = r.Header.Get("Traceparent")
		}
	}
	if err := g.Shutdown(); err != nil { // flushes the spans
		t.Fatal(err)
	}
	spans := col.Spans()

	servers := byName(spans, "POST contacts.create")
	if len(servers) != 1 {
		t.Fatalf("got %d spans named %q, want 1; all: %v", len(servers), "POST contacts.create", names(spans))
	}
	srv := servers[0]
	if srv.Kind != "SERVER" || srv.ParentSpanID != "" {
		t.Errorf("request span: kind %s parent %q, want a SERVER root", srv.Kind, srv.ParentSpanID)
	}
	wantAttrs(t, srv, map[string]string{"http.request.method": "POST", "http.route": "/v1/contacts/create",
		"http.response.status_code": "200", "faxgate.caller": "svc"})
	if _, ok := srv.Attrs["faxgate.error"]; ok {
		t.Errorf("forwarded request has faxgate.error: %v", srv.Attrs)
	}
	if srv.Resource["service.name"] != "faxgate-test" {
		t.Errorf("resource service.name = %q, want faxgate-test", srv.Resource["service.name"])
	}

	kids := children(spans, srv)
	var client, redis, budgetSpan otlptest.Span
	for _, k := range kids {
		switch {
		case k.Kind == "CLIENT" && strings.HasPrefix(k.Name, "POST "):
			client = k
		case k.Name == "ratelimit.redis":
			redis = k
		case k.Name == "budget.redis":
			budgetSpan = k
		}
	}
	if client.SpanID == "" || redis.SpanID == "" || budgetSpan.SpanID == "" {
		t.Fatalf("children of the request span: %v, want a CLIENT span, ratelimit.redis and budget.redis", names(kids))
	}
	wantAttrs(t, budgetSpan, map[string]string{"db.system.name": "redis", "faxgate.backend": "redis"})
	wantAttrs(t, client, map[string]string{"http.request.method": "POST", "url.template": "/v1/contacts/create",
		"http.response.status_code": "200"})
	wantAttrs(t, redis, map[string]string{"db.system.name": "redis", "faxgate.backend": "redis"})
	if want := "00-" + srv.TraceID + "-" + client.SpanID + "-01"; upstreamTP != want {
		t.Errorf("upstream traceparent = %q, want the client span's %q", upstreamTP, want)
	}

	if list := byName(spans, "POST contacts.list"); len(list) != 1 {
		t.Errorf("got %d contacts.list spans, want 1", len(list))
	} else {
		var local bool
		for _, k := range children(spans, list[0]) {
			if k.Name == "ratelimit.redis" {
				local = k.Attrs["faxgate.backend"] == "local" && k.StatusError && !strings.Contains(k.StatusText, "127.0.0.1")
			}
		}
		if !local {
			t.Errorf("with Redis gone, no ratelimit.redis span with faxgate.backend local and an Error status: %v", names(children(spans, list[0])))
		}
	}

	denied := byName(spans, "POST numbers.delete")
	if len(denied) != 1 {
		t.Fatalf("got %d numbers.delete spans, want 1", len(denied))
	}
	wantAttrs(t, denied[0], map[string]string{"faxgate.error": "forbidden", "faxgate.decision": "denied",
		"http.response.status_code": "403", "http.route": "/v1/numbers/delete"})

	renewals := byName(spans, "token.renew")
	if len(renewals) == 0 {
		t.Fatalf("no token.renew span; all: %v", names(spans))
	}
	renew := renewals[0]
	if renew.ParentSpanID != "" || renew.Attrs["faxgate.result"] != "ok" {
		t.Errorf("token.renew: parent %q result %q, want a root with result ok", renew.ParentSpanID, renew.Attrs["faxgate.result"])
	}
	var store, fetch bool
	for _, k := range children(spans, renew) {
		if strings.HasPrefix(k.Name, "token.store.") && k.Attrs["db.system.name"] == "redis" {
			store = true
		}
		fetch = fetch || k.Name == "token.fetch"
	}
	if !store || !fetch {
		t.Errorf("token.renew children %v, want token.store.* (db.system.name redis) and token.fetch", names(children(spans, renew)))
	}

	// The access line carries the request span's IDs.
	found := false
	for _, l := range g.LogLines("request") {
		if l["route"] == "contacts.create" {
			found = true
			if l["trace_id"] != srv.TraceID || l["span_id"] != srv.SpanID {
				t.Errorf("access line trace_id %v span_id %v, want %s %s", l["trace_id"], l["span_id"], srv.TraceID, srv.SpanID)
			}
		}
	}
	if !found {
		t.Errorf("no access line for contacts.create")
	}
	for _, l := range g.LogLines("audit") {
		if l["trace_id"] != denied[0].TraceID || l["span_id"] != denied[0].SpanID {
			t.Errorf("audit line trace_id %v span_id %v, want %s %s", l["trace_id"], l["span_id"], denied[0].TraceID, denied[0].SpanID)
		}
	}

	// headers_env's headers go to the collector, as headers only.
	for _, h := range col.Headers() {
		if h.Get("Authorization") != collectorAuth || h.Get("X-Scope-OrgID") != "team-a" {
			t.Errorf("an export came with Authorization %q X-Scope-OrgID %q, want headers_env's", h.Get("Authorization"), h.Get("X-Scope-OrgID"))
			break
		}
	}

	noSecrets(t, col, map[string]string{"API key": gatewaytest.Key, "token": token, "query": canaryQuery,
		"body": canaryBody, "caller Authorization": canaryAuth, "X-Api-Key": canaryKey, "Cookie": canaryCookie,
		"collector's authorization": "collector-Secret-42", "Redis password": redisPassword})
}

func names(spans []otlptest.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Kind+" "+s.Name)
	}
	return out
}

// noSecrets searches every byte the collector received, as sent.
func noSecrets(t *testing.T, col *otlptest.Collector, secrets map[string]string) {
	t.Helper()
	raw := col.Raw()
	if len(raw) == 0 {
		t.Fatal("the collector received nothing to search")
	}
	for what, s := range secrets {
		if s == "" {
			t.Fatalf("canary %s is empty", what)
		}
		for _, b := range raw {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("the %s reached the collector", what)
				break
			}
		}
	}
}

// TestTracingResendAfter401: a token revoked under the gateway makes two
// CLIENT spans (the second with http.request.resend_count 1) and a wait for
// the new token, all children of the request's span.
func TestTracingResendAfter401(t *testing.T) {
	col := otlptest.Start(t, otlptest.Accept)
	// Once the token is revoked, the token endpoint answers slowly, so
	// that the resend waits for the new token: a renewal done before the
	// resend asks (a busy machine's scheduling) would leave no wait to see.
	var slowAuth atomic.Bool
	g := gatewaytest.Start(t, gatewaytest.Options{Config: traceCallers + tracingYAML(col.URL, 1),
		Wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if slowAuth.Load() && r.URL.Path == "/v1/auth" {
					time.Sleep(300 * time.Millisecond) // models a slow token endpoint
				}
				h.ServeHTTP(w, r)
			})
		}})
	old := g.Tokens.Current().Value.Reveal()
	slowAuth.Store(true)
	g.Sim.RevokeTokens()
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	tps := []string{}
	for _, r := range g.Sim.Requests() {
		if r.Path == "/v1/contacts/list" {
			tps = append(tps, r.Header.Get("Traceparent"))
		}
	}
	newTok := g.Tokens.Current().Value.Reveal()
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	spans := col.Spans()
	srv := byName(spans, "POST contacts.list")
	if len(srv) != 1 {
		t.Fatalf("got %d request spans, want 1: %v", len(srv), names(spans))
	}
	var clients []otlptest.Span
	wait := false
	for _, k := range children(spans, srv[0]) {
		if k.Kind == "CLIENT" && strings.HasPrefix(k.Name, "POST ") {
			clients = append(clients, k)
		}
		wait = wait || k.Name == "token.wait"
	}
	if len(clients) != 2 {
		t.Fatalf("got %d CLIENT spans, want 2 (the 401 and the resend): %v", len(clients), names(children(spans, srv[0])))
	}
	wantAttrs(t, clients[0], map[string]string{"http.response.status_code": "401"})
	wantAttrs(t, clients[1], map[string]string{"http.response.status_code": "200", "http.request.resend_count": "1"})
	if !clients[0].StatusError || clients[1].StatusError {
		t.Errorf("client span status errors %v %v, want the 401 only", clients[0].StatusError, clients[1].StatusError)
	}
	if !wait {
		t.Errorf("no token.wait span under the request: %v", names(children(spans, srv[0])))
	}
	if len(tps) != 2 || tps[0] == tps[1] || !strings.Contains(tps[0], clients[0].SpanID) || !strings.Contains(tps[1], clients[1].SpanID) {
		t.Errorf("upstream traceparents %q, want one per client span %s, %s", tps, clients[0].SpanID, clients[1].SpanID)
	}
	noSecrets(t, col, map[string]string{"old token": old, "new token": newTok, "API key": gatewaytest.Key})
}

// TestTracingSampling: parent-based. A sampled traceparent is always
// traced as its child, an unsampled one never, and requests without one at
// sample_ratio (0 here: none; 1 in the other tests: all).
func TestTracingSampling(t *testing.T) {
	col := otlptest.Start(t, otlptest.Accept)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: traceCallers + tracingYAML(col.URL, 0)})
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	var upstreamTS string
	do := func(tp string) (upstreamTP string, line map[string]any) {
		hdr := []string{"Content-Type", "application/json", "tracestate", "vendor=1"}
		if tp != "" {
			hdr = append(hdr, "traceparent", tp)
		}
		resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, hdr...)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		rec := g.Sim.Requests()
		lines := g.LogLines("request")
		upstreamTS = rec[len(rec)-1].Header.Get("Tracestate")
		return rec[len(rec)-1].Header.Get("Traceparent"), lines[len(lines)-1]
	}
	sampledTP, sampledLine := do("00-" + trace + "-00f067aa0ba902b7-01")
	if upstreamTS != "vendor=1" {
		t.Errorf("tracestate of a valid traceparent went upstream as %q, want it kept", upstreamTS)
	}
	unsampledTP, unsampledLine := do("00-" + trace + "-00f067aa0ba902b8-00")
	noneTP, noneLine := do("")
	if upstreamTS != "" {
		t.Errorf("tracestate without a traceparent went upstream as %q, want it dropped", upstreamTS)
	}
	junkTP, _ := do("00-not-a-traceparent")
	if upstreamTS != "" || len(junkTP) != 55 || strings.Contains(junkTP, "not") {
		t.Errorf("an invalid traceparent went upstream as %q (tracestate %q), want faxgate's own and no tracestate", junkTP, upstreamTS)
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	spans := byName(col.Spans(), "POST contacts.list")
	if len(spans) != 1 {
		t.Fatalf("got %d request spans, want 1 (the sampled parent's child only)", len(spans))
	}
	s := spans[0]
	if s.TraceID != trace || s.ParentSpanID != "00f067aa0ba902b7" {
		t.Errorf("sampled request: trace %s parent %s, want %s and the caller's span", s.TraceID, s.ParentSpanID, trace)
	}
	if !strings.HasPrefix(sampledTP, "00-"+trace+"-") || !strings.HasSuffix(sampledTP, "-01") {
		t.Errorf("sampled request went upstream with %q", sampledTP)
	}
	// Unsampled: the trace goes on (flag 00), with faxgate's span as parent.
	if !strings.HasPrefix(unsampledTP, "00-"+trace+"-") || !strings.HasSuffix(unsampledTP, "-00") ||
		strings.Contains(unsampledTP, "00f067aa0ba902b8") {
		t.Errorf("unsampled request went upstream with %q, want the trace, unsampled, under faxgate's span", unsampledTP)
	}
	if !strings.HasSuffix(noneTP, "-00") {
		t.Errorf("request without traceparent at ratio 0 went upstream with %q, want unsampled", noneTP)
	}
	// With tracing on every line carries trace_id and span_id.
	for name, l := range map[string]map[string]any{"sampled": sampledLine, "unsampled": unsampledLine, "none": noneLine} {
		if l["trace_id"] == nil || l["span_id"] == nil {
			t.Errorf("%s: access line without trace_id/span_id: %v", name, l)
		}
	}
	if sampledLine["trace_id"] != trace || unsampledLine["trace_id"] != trace {
		t.Errorf("access lines' trace_id %v %v, want %s", sampledLine["trace_id"], unsampledLine["trace_id"], trace)
	}
	if sampledLine["span_id"] != s.SpanID {
		t.Errorf("access line span_id %v, want the request span's %s", sampledLine["span_id"], s.SpanID)
	}
}

// TestTraceIDInLogsWithTracingOff: with tracing off, a valid traceparent
// puts its trace_id (and no span_id) on the access and audit lines, and is
// passed upstream unchanged; an invalid one puts nothing.
func TestTraceIDInLogsWithTracingOff(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: traceCallers})
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, c := range []struct {
		tp, want string
	}{
		{tp, "0af7651916cd43dd8448eb211c80319c"},
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", ""},
		{"not a traceparent", ""},
		{"", ""},
	} {
		hdr := []string{"Content-Type", "application/json"}
		if c.tp != "" {
			hdr = append(hdr, "traceparent", c.tp)
		}
		g.Do(t, "POST", "/v1/contacts/list", `{}`, hdr...)
		g.Do(t, "POST", "/v1/numbers/delete", `{"number_id":"n1"}`, hdr...)
		lines := g.LogLines("request")
		audits := g.LogLines("audit")
		for what, l := range map[string]map[string]any{"access": lines[len(lines)-2], "audit": audits[len(audits)-1]} {
			got, _ := l["trace_id"].(string)
			if got != c.want {
				t.Errorf("traceparent %q: %s line trace_id %q, want %q", c.tp, what, got, c.want)
			}
			if _, ok := l["span_id"]; ok {
				t.Errorf("traceparent %q: %s line has span_id with tracing off", c.tp, what)
			}
		}
	}
	for _, r := range g.Sim.Requests() {
		if r.Path == "/v1/contacts/list" {
			if got := r.Header.Get("Traceparent"); got != tp {
				t.Errorf("upstream traceparent %q, want the caller's, unchanged", got)
			}
			break
		}
	}
}

// TestExporterTroubleAddsNoLatency: a collector that refuses every export,
// or accepts and never answers, adds no latency to requests: their spans
// are queued in the background, and dropped when the queue is full. The
// load makes more spans than the queue holds.
func TestExporterTroubleAddsNoLatency(t *testing.T) {
	// Two spans a request: 2,500 requests overflow the queue of 4,096.
	const requests, workers = 2500, 6
	run := func(t *testing.T, tracing string) (p50, p99, max time.Duration, g *gatewaytest.Gateway) {
		g = gatewaytest.Start(t, gatewaytest.Options{Config: traceCallers + tracing})
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < requests; i += workers {
					start := time.Now()
					resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json")
					d := time.Since(start)
					if resp.StatusCode != 200 {
						t.Errorf("status %d", resp.StatusCode)
						return
					}
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], g
	}
	b50, b99, bmax, _ := run(t, "")
	t.Logf("tracing off:  p50 %v p99 %v max %v", b50, b99, bmax)
	for _, c := range []struct {
		name string
		mode otlptest.Mode
	}{{"refuses", otlptest.Refuse}, {"never answers", otlptest.Hang}} {
		t.Run(c.name, func(t *testing.T) {
			col := otlptest.Start(t, c.mode)
			p50, p99, max, g := run(t, tracingYAML(col.URL, 1))
			t.Logf("collector %s: p50 %v p99 %v max %v (%d export attempts)", c.name, p50, p99, max, col.Exports())
			// An export lasts up to TraceExportTimeout against either
			// collector (retries, or no answer): a request that waited for
			// one would take about that long. Half of it leaves the margin a
			// busy machine under the race detector needs (a max of 1.9 s
			// seen at a load of 19 on 2 cores).
			if max > gateway.TraceExportTimeout/2 || p99 > 5*b99+200*time.Millisecond {
				t.Errorf("collector %s: p99 %v max %v, against p99 %v without tracing", c.name, p99, max, b99)
			}
			// The load's client may hold a connection it dialed and never
			// used (the dial lost the race to a connection coming back idle).
			// net/http's Shutdown waits up to 5 s for such a connection's
			// first request, which would stand in the shutdown measured
			// here: closed, the drain has nothing to wait for, and what is
			// left is the flush.
			g.Client.CloseIdleConnections()
			start := time.Now()
			if err := g.Shutdown(); err != nil {
				t.Fatal(err)
			}
			// The flush gives up after TraceShutdownWait; 2 s more covers the
			// drain and a busy machine, and is far below the export timeout
			// (10 s) a flush that waited for the collector would take.
			if d, limit := time.Since(start), gateway.TraceShutdownWait+2*time.Second; d > limit {
				t.Errorf("shutdown took %v with the collector %s, want the flush to give up after %v (limit %v)",
					d, c.name, gateway.TraceShutdownWait, limit)
			}
			if n := strings.Count(g.Logs(), "trace export failed"); n > 1 {
				t.Errorf("the failing collector was logged %d times, want at most once a minute", n)
			}
		})
	}
}
