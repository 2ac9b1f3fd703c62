package gateway_test

import (
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/otlptest"
)

// TestUnidentifiedCannotForceTracing is the forced-sampling regression: at
// sample_ratio 0, a peer no caller matches sent sampled traceparents and
// got a span for each. Its requests are now traces of their own at
// sample_ratio, never children of the trace it names; an identified
// caller's sampled traceparent is still followed.
func TestUnidentifiedCannotForceTracing(t *testing.T) {
	col := otlptest.Start(t, otlptest.Accept)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: `
callers:
  trusted_proxies: ["127.0.0.0/8"]
  list:
    - { name: svc, header_values: ["svc"], allow: ["*"] }
` + tracingYAML(col.URL, 0)})
	const attacker = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := "00-" + attacker + "-00f067aa0ba902b7-01"
	for range 300 {
		resp, _ := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json", "traceparent", tp)
		if resp.StatusCode != 403 {
			t.Fatalf("an unidentified request got %d, want 403", resp.StatusCode)
		}
	}
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json",
		"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "X-Faxgate-Caller", "svc")
	if resp.StatusCode != 200 {
		t.Fatalf("the identified caller got %d: %s", resp.StatusCode, body)
	}
	for _, l := range g.LogLines("request") {
		if l["caller"] == "unidentified" && l["trace_id"] == attacker {
			t.Fatalf("an unidentified request's access line carries the trace it named: %v", l)
		}
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	var server []otlptest.Span
	for _, s := range col.Spans() {
		if s.Kind == "SERVER" {
			server = append(server, s)
		}
		if s.TraceID == attacker {
			t.Errorf("span %q was hung on the unidentified peer's trace", s.Name)
		}
	}
	if len(server) != 1 || server[0].Attrs["faxgate.caller"] != "svc" {
		t.Fatalf("got %d SERVER spans (%v), want the identified caller's one only", len(server), names(server))
	}
}

// TestExporterFollowsNoRedirect is the credential-forwarding regression: a
// collector answering 307 to another host got the spans and the
// headers_env value sent there.
func TestExporterFollowsNoRedirect(t *testing.T) {
	elsewhere := otlptest.Start(t, otlptest.Accept)
	col := otlptest.StartWith(t, otlptest.Redirect, otlptest.Options{RedirectTo: strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1)})
	const secret = "collector-Secret-redirect-77"
	g := gatewaytest.Start(t, gatewaytest.Options{Config: traceCallers + tracingYAML(col.URL, 1) + "  headers_env: OTLP_HEADERS\n",
		Env: map[string]string{"OTLP_HEADERS": "X-Api-Key=" + secret}})
	for range 5 {
		g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json")
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if col.Exports() == 0 {
		t.Fatal("no export reached the redirecting collector: the test proves nothing")
	}
	if n := elsewhere.Exports(); n != 0 {
		t.Fatalf("the exporter followed the redirect: %d exports (with headers %v) reached the other host", n, elsewhere.Headers())
	}
	if !strings.Contains(g.Logs(), "trace export failed") {
		t.Error("a redirecting collector was not reported as a failed export")
	}
	if strings.Contains(g.Logs(), secret) {
		t.Error("the headers_env value reached a log line")
	}
}

// TestExporterLogsNoCollectorBody is the echoed-header regression: a
// collector answering 400 with a body that echoed the request's headers put
// the headers_env secret in a warn line.
func TestExporterLogsNoCollectorBody(t *testing.T) {
	col := otlptest.Start(t, otlptest.Echo)
	const secret = "collector-Secret-echo-31"
	g := gatewaytest.Start(t, gatewaytest.Options{Config: traceCallers + tracingYAML(col.URL, 1) + "  headers_env: OTLP_HEADERS\n",
		Env: map[string]string{"OTLP_HEADERS": "Authorization=Bearer%20" + secret}})
	for range 5 {
		g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json")
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if col.Exports() == 0 {
		t.Fatal("no export reached the echoing collector: the test proves nothing")
	}
	logs := g.Logs()
	if !strings.Contains(logs, "trace export failed") || !strings.Contains(logs, "400") {
		t.Errorf("the failed export was not logged with its status:\n%s", logs)
	}
	if strings.Contains(logs, secret) {
		t.Error("the collector's echo of the headers_env value reached a log line")
	}
	if strings.Contains(logs, "Content-Type: application/x-protobuf") || strings.Contains(logs, "User-Agent") {
		t.Error("the collector's answer body reached a log line")
	}
}
