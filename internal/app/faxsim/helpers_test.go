package faxsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const testKey = "sk_test_0123456789"

// fakeClock is a concurrency-safe clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is a Sim behind a real HTTP server.
type env struct {
	sim   *Sim
	srv   *httptest.Server
	clock *fakeClock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvTTL(t, 0)
}

func newEnvTTL(t *testing.T, ttl time.Duration) *env {
	t.Helper()
	clk := newFakeClock()
	sim := New(Options{APIKey: testKey, TokenTTL: ttl, Now: clk.Now})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return &env{sim: sim, srv: srv, clock: clk}
}

// response is one decoded reply.
type response struct {
	code   int
	header http.Header
	raw    string
	body   map[string]any // nil when the body is not a JSON object
}

// do sends one request; hdr may set Content-Type or Authorization.
func (e *env) do(t *testing.T, method, path string, hdr map[string]string, body string) response {
	t.Helper()
	r, err := e.send(method, path, hdr, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is do for goroutines other than the test's, which must not call Fatal.
func (e *env) send(method, path string, hdr map[string]string, body string) (response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		return response{}, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading body: %w", method, path, err)
	}
	r := response{code: resp.StatusCode, header: resp.Header, raw: strings.TrimSpace(string(b))}
	var m map[string]any
	if json.Unmarshal(b, &m) == nil {
		r.body = m
	}
	return r, nil
}

// token obtains a fresh access token.
func (e *env) token(t *testing.T) string {
	t.Helper()
	r := e.do(t, "POST", "/v1/auth", jsonHdr, `{"api_secret_key":"`+testKey+`"}`)
	if r.code != 200 {
		t.Fatalf("auth: got %d %s, want 200", r.code, r.raw)
	}
	data, _ := r.body["data"].(map[string]any)
	tok, _ := data["access_token"].(string)
	if tok == "" {
		t.Fatalf("auth: no access_token in %s", r.raw)
	}
	return tok
}

// api sends an authenticated JSON request with a fresh token.
func (e *env) api(t *testing.T, method, path, body string) response {
	t.Helper()
	return e.do(t, method, path, authHdr(e.token(t)), body)
}

var jsonHdr = map[string]string{"Content-Type": "application/json"}

func authHdr(tok string) map[string]string {
	return map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + tok}
}

// wantFailure checks for HTTP code and a status 0 envelope with message msg.
func wantFailure(t *testing.T, r response, code int, msg string) {
	t.Helper()
	want := `{"status":0,"message":` + quote(msg) + `}`
	if r.code != code || r.raw != want {
		t.Errorf("got %d %s, want %d %s", r.code, r.raw, code, want)
	}
}

// wantOK checks for HTTP 200, status 1 and message msg.
func wantOK(t *testing.T, r response, msg string) {
	t.Helper()
	if r.code != 200 || r.body["status"] != float64(1) || r.body["message"] != msg {
		t.Errorf("got %d %s, want 200 with status 1 and message %q", r.code, r.raw, msg)
	}
}

func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSpace(b.String())
}

// dataList returns data as an array of objects.
func dataList(t *testing.T, r response) []map[string]any {
	t.Helper()
	arr, ok := r.body["data"].([]any)
	if !ok {
		t.Fatalf("data is not an array: %s", r.raw)
	}
	out := make([]map[string]any, 0, len(arr))
	for _, v := range arr {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("data element is not an object: %s", r.raw)
		}
		out = append(out, m)
	}
	return out
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
