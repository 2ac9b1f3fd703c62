//go:build tracing

package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/pinnedtool"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"

	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/redistest"
)

// jaegerConfig is Jaeger v2's collector YAML: OTLP/HTTP in, memory
// storage, the query API; its own telemetry off so it binds nothing else.
const jaegerConfig = `
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// jaegerBin finds the jaeger binary that .ci/install-tools builds (Jaeger
// v1.76.0); without it the test skips loudly, and fails with CI=true.
func jaegerBin(t *testing.T) string { return pinnedtool.Find(t, "jaeger") }

// jaeger is a running Jaeger.
type jaeger struct {
	otlp, query string // base URLs
}

func startJaeger(t *testing.T) *jaeger {
	bin := jaegerBin(t)
	var ports [3]int
	for i := range ports {
		p, err := redistest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, ports[0], ports[1], ports[2])), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config", cfg)
	// Read while jaeger writes it.
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("jaeger output:\n%s", out.String())
		}
	})
	j := &jaeger{otlp: fmt.Sprintf("http://127.0.0.1:%d", ports[2]), query: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	eventually.EventuallyErr(t, 30*time.Second, "jaeger answering", func() error {
		resp, err := http.Get(j.query + "/api/services")
		if err != nil {
			return fmt.Errorf("%v\n%s", err, out.String())
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("query API %s\n%s", resp.Status, out.String())
		}
		// The OTLP receiver starts with the pipeline; wait for it too.
		r2, err := http.Post(j.otlp+"/v1/traces", "application/json", strings.NewReader(`{}`))
		if err != nil {
			return fmt.Errorf("OTLP receiver: %v\n%s", err, out.String())
		}
		r2.Body.Close()
		return nil
	})
	return j
}

// The query API's JSON (Jaeger's /api/traces).
type jTrace struct {
	TraceID string  `json:"traceID"`
	Spans   []jSpan `json:"spans"`
}

type jSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func (s jSpan) tag(k string) string {
	for _, t := range s.Tags {
		if t.Key == k {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

func (s jSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// traces reads every trace of service from Jaeger, with the raw JSON.
func (j *jaeger) traces(t *testing.T, service string) ([]jTrace, []byte) {
	resp, err := http.Get(j.query + "/api/traces?service=" + service + "&limit=1000&lookback=1h")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Data []jTrace `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("jaeger /api/traces: %v: %s", err, raw)
	}
	return out.Data, raw
}

func find(traces []jTrace, op string) (jTrace, jSpan, bool) {
	for _, tr := range traces {
		for _, s := range tr.Spans {
			if s.OperationName == op {
				return tr, s, true
			}
		}
	}
	return jTrace{}, jSpan{}, false
}

func childrenOf(tr jTrace, parent jSpan) []jSpan {
	var out []jSpan
	for _, s := range tr.Spans {
		if s.parent() == parent.SpanID {
			out = append(out, s)
		}
	}
	return out
}

const (
	canaryQuery = "JaegerQueryCanary-1f2e"
	canaryBody  = "JaegerBodyCanary-3d4c"
	canaryAuth  = "JaegerAuthCanary-5b6a"
)

// TestTracesInJaeger sends traffic through a real gateway (Redis-shared
// rate limit and token) to faxsim with tracing to a real Jaeger, and reads
// the traces back through Jaeger's query API.
func TestTracesInJaeger(t *testing.T) {
	j := startJaeger(t)
	rs := redistest.Start(t)
	const service = "faxgate-e2e"
	g := gatewaytest.Start(t, gatewaytest.Options{
		RedisAddr: rs.Addr, RateLimitRedisAddr: rs.Addr, RateLimitTimeout: 2 * time.Second,
		Config: `
callers:
  list:
    - name: svc
      cidrs: ["127.0.0.0/8"]
      allow: ["*"]
tracing:
  endpoint: "` + j.otlp + `"
  sample_ratio: 1
  service_name: ` + service + `
`})
	firstToken := g.Tokens.Current().Value.Reveal()

	resp, body := g.Do(t, "POST", "/v1/contacts/create?secret="+canaryQuery,
		`{"first_name":"`+canaryBody+`","last_name":"L","type":"individual"}`,
		"Content-Type", "application/json", "Authorization", "Bearer "+canaryAuth)
	if resp.StatusCode != 200 {
		t.Fatalf("contacts.create: %d %s", resp.StatusCode, body)
	}
	// A revoked token: the upstream answers 401, the gateway renews and resends.
	g.Sim.RevokeTokens()
	if resp, body = g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json"); resp.StatusCode != 200 {
		t.Fatalf("contacts.list after revocation: %d %s", resp.StatusCode, body)
	}
	secondToken := g.Tokens.Current().Value.Reveal()
	received := map[string][]string{}
	for _, r := range g.Sim.Requests() {
		received[r.Path] = append(received[r.Path], r.Header.Get("Traceparent"))
	}
	if err := g.Shutdown(); err != nil { // flushes the spans
		t.Fatal(err)
	}

	// Jaeger stores what its batch processor hands on: poll.
	var traces []jTrace
	var raw []byte
	eventually.EventuallyErr(t, 20*time.Second, "the expected traces in jaeger", func() error {
		traces, raw = j.traces(t, service)
		_, _, a := find(traces, "POST contacts.create")
		_, _, b := find(traces, "POST contacts.list")
		_, _, c := find(traces, "token.renew")
		if !a || !b || !c {
			return fmt.Errorf("it has %s", raw)
		}
		return nil
	})

	// The span tree of contacts.create: SERVER, with a CLIENT child and the
	// Redis rate-limit decision.
	tr, srv, _ := find(traces, "POST contacts.create")
	if srv.tag("span.kind") != "server" || srv.parent() != "" {
		t.Errorf("request span: kind %q parent %q, want a server root", srv.tag("span.kind"), srv.parent())
	}
	for k, v := range map[string]string{"http.request.method": "POST", "http.route": "/v1/contacts/create",
		"http.response.status_code": "200", "faxgate.caller": "svc"} {
		if got := srv.tag(k); got != v {
			t.Errorf("request span %s = %q, want %q", k, got, v)
		}
	}
	var client, redis jSpan
	for _, k := range childrenOf(tr, srv) {
		switch {
		case k.tag("span.kind") == "client" && strings.HasPrefix(k.OperationName, "POST "):
			client = k
		case k.OperationName == "ratelimit.redis":
			redis = k
		}
	}
	if client.SpanID == "" {
		t.Fatalf("no client span under the request span: %+v", childrenOf(tr, srv))
	}
	if redis.SpanID == "" || redis.tag("db.system.name") != "redis" || redis.tag("faxgate.backend") != "redis" {
		t.Errorf("Redis decision span %+v, want ratelimit.redis with db.system.name and faxgate.backend redis", redis)
	}
	// faxsim's recorded traceparent points at the client span.
	if got, want := received["/v1/contacts/create"], "00-"+srv.TraceID+"-"+client.SpanID+"-01"; len(got) != 1 || got[0] != want {
		t.Errorf("faxsim received traceparent %q, want %q (the client span)", got, want)
	}

	// The 401 resend: two client spans under one request span.
	tr, srv, _ = find(traces, "POST contacts.list")
	var clients []jSpan
	for _, k := range childrenOf(tr, srv) {
		// The upstream attempts (the Redis decision is a client span too).
		if k.tag("span.kind") == "client" && strings.HasPrefix(k.OperationName, "POST ") {
			clients = append(clients, k)
		}
	}
	if len(clients) != 2 {
		t.Errorf("contacts.list after a revocation: %d client spans, want 2 (the 401 and the resend)", len(clients))
	}
	if got := received["/v1/contacts/list"]; len(got) != 2 || got[0] == got[1] {
		t.Errorf("faxsim received traceparents %q, want two, one per attempt", got)
	}

	// The renewals: traces of their own.
	if _, renew, _ := find(traces, "token.renew"); renew.parent() != "" || renew.tag("faxgate.result") != "ok" {
		t.Errorf("token.renew: parent %q result %q, want a root with result ok", renew.parent(), renew.tag("faxgate.result"))
	}

	// No secret anywhere in what Jaeger stored.
	for what, s := range map[string]string{"API key": gatewaytest.Key, "first token": firstToken, "second token": secondToken,
		"query string": canaryQuery, "body": canaryBody, "caller's Authorization": canaryAuth} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the %s is in what Jaeger stored", what)
		}
	}
	t.Logf("jaeger holds %d traces of %s (%d bytes of JSON)", len(traces), service, len(raw))
}
