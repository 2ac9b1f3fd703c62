package faxsim

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func newLimitedEnv(t *testing.T, endpoint, tenant Window) *env {
	t.Helper()
	clk := newFakeClock()
	sim := New(Options{APIKey: testKey, Now: clk.Now, EndpointLimit: endpoint, TenantLimit: tenant})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return &env{sim: sim, srv: srv, clock: clk}
}

// TestVendorEndpointLimit: past the per-endpoint limit the simulator answers
// 429 with Retry-After until the window resets, per endpoint, across tokens.
func TestVendorEndpointLimit(t *testing.T) {
	e := newLimitedEnv(t, Window{Requests: 3, Per: 10 * time.Second}, Window{})
	tok, other := e.token(t), e.token(t)
	for i := 1; i <= 3; i++ {
		tk := tok
		if i == 2 {
			tk = other // the limit is the tenant's endpoint, whatever the token
		}
		r := e.do(t, "GET", "/v1/esign_templates", authHdr(tk), "")
		if r.code != 200 || r.header.Get("X-RateLimit-Limit") != "3" || r.header.Get("X-RateLimit-Remaining") != strconv.Itoa(3-i) {
			t.Fatalf("request %d: %d limit %q remaining %q", i, r.code, r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"))
		}
	}
	e.clock.Advance(4 * time.Second)
	r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), "")
	wantFailure(t, r, 429, "Too Many Attempts.")
	if got := r.header.Get("Retry-After"); got != "6" {
		t.Errorf("Retry-After = %q, want 6 (the window resets 10 s after its first request)", got)
	}
	if r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("remaining %q", r.header.Get("X-RateLimit-Remaining"))
	}
	// Another endpoint has its own window.
	if r := e.api(t, "POST", "/v1/contacts/list", `{}`); r.code != 200 {
		t.Errorf("another endpoint: %d", r.code)
	}
	if e.sim.Throttled() != 1 {
		t.Errorf("throttled = %d, want 1", e.sim.Throttled())
	}
	e.clock.Advance(6 * time.Second)
	if r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""); r.code != 200 || r.header.Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("after the reset: %d remaining %q", r.code, r.header.Get("X-RateLimit-Remaining"))
	}
}

// TestVendorTenantLimit: the tenant limit spans every endpoint; a refused
// request spends nothing.
func TestVendorTenantLimit(t *testing.T) {
	e := newLimitedEnv(t, Window{}, Window{Requests: 2, Per: time.Minute})
	tok := e.token(t)
	for _, p := range []string{"/v1/esign_templates", "/v1/contacts/list"} {
		if r := e.do(t, "GET", p, authHdr(tok), ""); r.code != 200 && r.code != 405 { // contacts/list is POST: 405 still counts
			t.Fatalf("%s: %d %s", p, r.code, r.raw)
		}
	}
	r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), "")
	wantFailure(t, r, 429, "Too Many Attempts.")
	if r.header.Get("Retry-After") != "60" {
		t.Errorf("Retry-After %q, want 60", r.header.Get("Retry-After"))
	}
	e.clock.Advance(time.Minute)
	if r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""); r.code != 200 {
		t.Errorf("after the window: %d", r.code)
	}
}

func TestParseWindow(t *testing.T) {
	if w, err := ParseWindow("2500/5m"); err != nil || w != (Window{2500, 5 * time.Minute}) || w.String() != "2500/5m0s" {
		t.Errorf("2500/5m: %v %v", w, err)
	}
	for _, bad := range []string{"", "2500", "0/5m", "x/5m", "10/0s", "10/soon", "-1/1s"} {
		if _, err := ParseWindow(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
