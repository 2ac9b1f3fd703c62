package gateway_test

import (
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/gatewaytest"
	"github.com/faxgate/faxgate/internal/testing/proxytest"
)

// The proxy's credentials in these tests: none may reach a log line, a
// metric, the status page or the upstream.
const (
	proxyUser     = "faxgate-egress"
	proxyPassword = "Pr0xy-Secret-c4n4ry"
)

const egressCallers = `
callers:
  list:
    - { name: svc, cidrs: ["127.0.0.0/8"], allow: ["*"] }
rate_limit:
  default: { rps: 100000, burst: 100000 }
`

// tlsUpstream is the simulator over TLS, and the file of its certificate
// for upstream.ca_file.
func tlsUpstream(t *testing.T) (*faxsim.Sim, *httptest.Server, string) {
	t.Helper()
	sim := faxsim.New(faxsim.Options{APIKey: gatewaytest.Key})
	up := httptest.NewTLSServer(sim)
	t.Cleanup(up.Close)
	ca := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return sim, up, ca
}

// authFile writes "user:password" for the proxy and returns its path.
func authFile(t *testing.T, user, password string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "proxy-auth")
	if err := os.WriteFile(p, []byte(user+":"+password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// noProxyCredentials holds that the proxy's credentials reached no log line,
// metric, status page, and no request the upstream received.
func noProxyCredentials(t *testing.T, g *gatewaytest.Gateway) {
	t.Helper()
	where := map[string]string{"logs": g.Logs()}
	for _, path := range []string{"/metrics", "/status.json", "/"} {
		resp, err := http.Get(g.AdminURL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		where[path] = string(b)
	}
	for _, r := range g.Sim.Requests() {
		for k, vs := range r.Header {
			where["upstream request header "+k] = strings.Join(vs, ",")
		}
		if r.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("the upstream received a Proxy-Authorization header on %s %s", r.Method, r.Path)
		}
	}
	for what, s := range where {
		if strings.Contains(s, proxyPassword) {
			t.Errorf("the proxy's password is in %s", what)
		}
	}
}

// TestEgressProxyHTTPSThroughConnect: with an https base_url every request,
// the token endpoint's included, goes through the proxy in a CONNECT tunnel
// with the proxy's credentials; the vendor never sees them, nor a caller's
// own Proxy-Authorization; a proxy that refuses the credentials is a 502
// that counts, and a rotated credentials file is used without a restart.
func TestEgressProxyHTTPSThroughConnect(t *testing.T) {
	px := proxytest.Start(t, proxytest.Options{User: proxyUser, Password: proxyPassword})
	sim, up, ca := tlsUpstream(t)
	creds := authFile(t, proxyUser, proxyPassword)
	g := gatewaytest.Start(t, gatewaytest.Options{Config: egressCallers, Sim: sim, Upstream: up,
		UpstreamYAML: fmt.Sprintf("  ca_file: %q\n  proxy_url: %q\n  proxy_auth_file: %q\n", ca, px.URL, creds)})
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json",
		"Proxy-Authorization", "Basic Y2FsbGVyOmNhbGxlcg==")
	if resp.StatusCode != 200 {
		t.Fatalf("through the proxy: %d %s", resp.StatusCode, body)
	}
	if n := strings.Count(px.Log(), "CONNECT 127.0.0.1:"); n < 1 {
		t.Errorf("the proxy saw %d CONNECTs, want the token's and the request's tunnel\n%s", n, px.Log())
	}
	if sim.AuthCalls() < 1 {
		t.Error("no token was fetched")
	}
	noProxyCredentials(t, g)

	// The credentials rotate to ones the proxy refuses, without a restart:
	// a new tunnel is refused (401 or 407), the request certainly never
	// reached the vendor (sent again retry_unsent times), and it is a 502.
	rotate(t, g, creds, "wrong-"+proxyPassword)
	resp, body = g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json")
	if resp.StatusCode != 502 || !strings.Contains(body, `"error":"upstream_unavailable"`) {
		t.Fatalf("with refused credentials: %d %s, want 502 upstream_unavailable", resp.StatusCode, body)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.UpstreamProxyErrors.WithLabelValues("auth")); got != 3 {
		t.Errorf("faxgate_upstream_proxy_errors_total{reason=auth} = %v, want 3 (the attempt and its two resends)", got)
	}
	if line := g.LastAccessLine(t, "contacts.list"); line["attempts"] != 3.0 || line["upstream_status"] != 0.0 {
		t.Errorf("access line %v, want 3 attempts and no upstream status", line)
	}
	var warned map[string]any
	for _, l := range g.LogLines("the egress proxy refused the upstream request") {
		warned = l
	}
	if warned == nil || warned["level"] != "warn" || (warned["status"] != 407.0 && warned["status"] != 401.0) {
		t.Errorf("no warn line with the proxy's refusal status: %v", warned)
	}
	// The status shows the proxy without its credentials, and the count
	// of each.
	st, _ := getStatus(t, g)
	if e := st.Egress; e.Proxy != px.URL || !e.Credentials || e.ProxyErrors["auth"] != 3 || e.Retries["unsent"] != 2 {
		t.Errorf("status egress %+v, want the proxy %s with credentials, 3 auth failures, 2 unsent resends", e, px.URL)
	}
	if _, page := adminGet(t, g, "/", ""); !strings.Contains(page, `id="egress"`) || !strings.Contains(page, px.URL) {
		t.Error("the status page does not show the proxy")
	}
	// And back: the right credentials serve again.
	rotate(t, g, creds, proxyPassword)
	if resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json"); resp.StatusCode != 200 {
		t.Fatalf("after the credentials were rotated back: %d %s", resp.StatusCode, body)
	}
	noProxyCredentials(t, g)
}

// rotate writes password into the credentials file and waits until the
// gateway has read it, then drops its idle tunnels, so that the next
// request asks the proxy again.
func rotate(t *testing.T, g *gatewaytest.Gateway, file, password string) {
	t.Helper()
	before := len(g.LogLines("the egress proxy's credentials were re-read"))
	if err := os.WriteFile(file, []byte(proxyUser+":"+password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually.Eventually(t, 20*time.Second, "the credentials file re-read", func() bool {
		return len(g.LogLines("the egress proxy's credentials were re-read")) > before
	})
	g.Gateway.CloseIdleConnections()
}

// TestEgressProxyHTTPAbsoluteForm: with an http base_url the proxy gets
// absolute-form requests with its credentials; it forwards them without
// them, and the vendor sees neither the proxy's nor the caller's.
func TestEgressProxyHTTPAbsoluteForm(t *testing.T) {
	px := proxytest.Start(t, proxytest.Options{User: proxyUser, Password: proxyPassword})
	g := gatewaytest.Start(t, gatewaytest.Options{Config: egressCallers,
		UpstreamYAML: fmt.Sprintf("  proxy_url: %q\n  proxy_auth_file: %q\n", px.URL, authFile(t, proxyUser, proxyPassword))})
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json",
		"Proxy-Authorization", "Basic Y2FsbGVyOmNhbGxlcg==")
	if resp.StatusCode != 200 {
		t.Fatalf("through the proxy: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(px.Log(), "POST http://127.0.0.1:") {
		t.Errorf("the proxy saw no absolute-form POST:\n%s", px.Log())
	}
	noProxyCredentials(t, g)
}

// TestEgressProxyUnreachableIsUnsent: a proxy that is not running refuses
// the connection: the request certainly never reached the vendor, so it is
// sent again retry_unsent times, then answered 502 upstream_unavailable;
// the access line says how many attempts were made, and the proxy's
// failure is counted and logged at warn.
func TestEgressProxyUnreachableIsUnsent(t *testing.T) {
	px := proxytest.Start(t, proxytest.Options{})
	g := gatewaytest.Start(t, gatewaytest.Options{Config: egressCallers,
		UpstreamYAML: fmt.Sprintf("  proxy_url: %q\n  retry_unsent: 2\n", px.URL)})
	px.Kill()
	g.Gateway.CloseIdleConnections()
	resp, body := g.Do(t, "POST", "/v1/contacts/list", `{}`, "Content-Type", "application/json")
	if resp.StatusCode != 502 || !strings.Contains(body, `"error":"upstream_unavailable"`) {
		t.Fatalf("with the proxy gone: %d %s, want 502 upstream_unavailable", resp.StatusCode, body)
	}
	line := g.LastAccessLine(t, "contacts.list")
	if line["attempts"] != 3.0 {
		t.Errorf("attempts %v on the access line, want 3 (one and two resends)", line["attempts"])
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.UpstreamRetries.WithLabelValues("contacts.list", "unsent")); got != 2 {
		t.Errorf("faxgate_upstream_retries_total{reason=unsent} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(g.Metrics.Proxy.UpstreamProxyErrors.WithLabelValues("unreachable")); got < 3 {
		t.Errorf("faxgate_upstream_proxy_errors_total{reason=unreachable} = %v, want 3", got)
	}
	if len(g.LogLines("the egress proxy could not be reached")) == 0 {
		t.Error("no warn line says the proxy could not be reached")
	}
}
