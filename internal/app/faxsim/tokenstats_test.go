package faxsim

import (
	"encoding/json"
	"testing"
	"time"
)

// TestTokenStats: every Bearer token presented is counted by what it was
// when it arrived: valid, revoked, expired, or never issued here; and the
// counts are in /_sim/stats, cleared by Reset.
func TestTokenStats(t *testing.T) {
	e := newEnvTTL(t, time.Minute)
	first := e.token(t)
	e.api(t, "POST", "/v1/contacts/list", `{}`).mustCode(t, 200) // valid
	e.sim.RevokeTokens()
	e.api(t, "POST", "/v1/contacts/list", `{}`).mustCode(t, 200) // a new token: valid
	e.do(t, "POST", "/v1/contacts/list", authHdr(first), `{}`).mustCode(t, 401)
	e.do(t, "POST", "/v1/contacts/list", authHdr("never-issued"), `{}`).mustCode(t, 401)
	late := e.token(t)
	e.clock.Advance(2 * time.Minute)
	e.do(t, "POST", "/v1/contacts/list", authHdr(late), `{}`).mustCode(t, 401)
	e.do(t, "POST", "/v1/contacts/list", jsonHdr, `{}`).mustCode(t, 401) // no token: not counted

	want := TokenStats{Valid: 2, Revoked: 1, Expired: 1, Unknown: 1, Distinct: 4}
	if got := e.sim.TokenStats(); got != want {
		t.Errorf("TokenStats = %+v, want %+v", got, want)
	}
	var stats struct {
		Tokens TokenStats `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(e.do(t, "GET", "/_sim/stats", nil, "").raw), &stats); err != nil || stats.Tokens != want {
		t.Errorf("/_sim/stats tokens = %+v, %v; want %+v", stats.Tokens, err, want)
	}
	e.sim.Reset()
	e.do(t, "POST", "/v1/contacts/list", authHdr(first), `{}`).mustCode(t, 401)
	if got := e.sim.TokenStats(); got != (TokenStats{Revoked: 1, Distinct: 1}) {
		t.Errorf("after Reset and one revoked token: %+v", got)
	}
}

func (r response) mustCode(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("HTTP %d, want %d: %s", r.code, code, r.raw)
	}
}
