package faxsim

import (
	"net/http"
	"regexp"
	"testing"
	"time"
)

func TestAuth(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name     string
		body     string
		wantCode int
		wantMsg  string
	}{
		{"valid key", `{"api_secret_key":"` + testKey + `"}`, 200, "Token generated successfully."},
		{"wrong key", `{"api_secret_key":"nope"}`, 401, "API Secret Key is invalid."},
		{"key with extra space", `{"api_secret_key":"` + testKey + ` "}`, 401, "API Secret Key is invalid."},
		{"missing key", `{}`, 401, "API Secret Key is invalid."},
		{"empty body", ``, 401, "API Secret Key is invalid."},
		{"key not a string", `{"api_secret_key":123}`, 401, "API Secret Key is invalid."},
		{"body not an object", `["` + testKey + `"]`, 401, "API Secret Key is invalid."},
		{"malformed JSON", `{"api_secret_key":`, 400, "The request body is not valid JSON."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/auth", jsonHdr, tc.body)
			if tc.wantCode != 200 {
				wantFailure(t, r, tc.wantCode, tc.wantMsg)
				return
			}
			wantOK(t, r, tc.wantMsg)
			data, _ := r.body["data"].(map[string]any)
			if got := data["token_type"]; got != "Bearer" {
				t.Errorf("token_type: got %v, want Bearer", got)
			}
			if got := data["expires_in"]; got != float64(86400) {
				t.Errorf("expires_in: got %v, want 86400", got)
			}
			tok, _ := data["access_token"].(string)
			if !regexp.MustCompile(`^[A-Za-z0-9_-]{40,}$`).MatchString(tok) {
				t.Errorf("access_token: got %q, want 40+ URL-safe characters", tok)
			}
			if got := r.header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type: got %q, want application/json", got)
			}
		})
	}
	t.Run("every call counted", func(t *testing.T) {
		if got, want := e.sim.AuthCalls(), len(tests); got != want {
			t.Errorf("AuthCalls: got %d, want %d", got, want)
		}
	})
	t.Run("tokens are distinct", func(t *testing.T) {
		if a, b := e.token(t), e.token(t); a == b {
			t.Errorf("two auth calls returned the same token %q", a)
		}
	})
}

func TestAuthEmptyConfiguredKeyAuthenticatesNobody(t *testing.T) {
	sim := New(Options{})
	e := &env{sim: sim}
	e.srv = newServer(t, sim)
	for _, body := range []string{`{"api_secret_key":""}`, `{}`} {
		wantFailure(t, e.do(t, "POST", "/v1/auth", jsonHdr, body), 401, "API Secret Key is invalid.")
	}
}

func TestTokenExpiry(t *testing.T) {
	e := newEnvTTL(t, time.Hour)
	r := e.do(t, "POST", "/v1/auth", jsonHdr, `{"api_secret_key":"`+testKey+`"}`)
	data, _ := r.body["data"].(map[string]any)
	if got := data["expires_in"]; got != float64(3600) {
		t.Errorf("expires_in: got %v, want 3600", got)
	}
	tok, _ := data["access_token"].(string)
	steps := []struct {
		name    string
		advance time.Duration
		want    int
	}{
		{"fresh", 0, 200},
		{"one second before expiry", time.Hour - time.Second, 200},
		{"at expiry", time.Second, 401},
		{"clock moved back", -time.Minute, 401}, // an expired token stays expired
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			e.clock.Advance(st.advance)
			r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), "")
			if r.code != st.want {
				t.Fatalf("got %d %s, want %d", r.code, r.raw, st.want)
			}
			if st.want == 401 {
				wantFailure(t, r, 401, "Unauthenticated.")
			}
		})
	}
}

func TestBearerHeader(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	tests := []struct {
		name   string
		values []string
		want   int
	}{
		{"valid", []string{"Bearer " + tok}, 200},
		{"missing", nil, 401},
		{"lower-case scheme", []string{"bearer " + tok}, 401},
		{"two spaces", []string{"Bearer  " + tok}, 401},
		{"other scheme", []string{"Token " + tok}, 401},
		{"no token", []string{"Bearer "}, 401},
		{"trailing text", []string{"Bearer " + tok + " x"}, 401},
		{"unknown token", []string{"Bearer " + tok + "x"}, 401},
		{"API key as bearer", []string{"Bearer " + testKey}, 401},
		{"two headers", []string{"Bearer " + tok, "Bearer " + tok}, 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", e.srv.URL+"/v1/contacts/list", nil)
			for _, v := range tc.values {
				req.Header.Add("Authorization", v)
			}
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

func TestRevokeTokens(t *testing.T) {
	e := newEnv(t)
	old := e.token(t)
	if r := e.do(t, "GET", "/v1/esign_templates", authHdr(old), ""); r.code != 200 {
		t.Fatalf("before revoke: got %d, want 200", r.code)
	}
	e.sim.RevokeTokens()
	wantFailure(t, e.do(t, "GET", "/v1/esign_templates", authHdr(old), ""), 401, "Unauthenticated.")
	if r := e.do(t, "GET", "/v1/esign_templates", authHdr(e.token(t)), ""); r.code != 200 {
		t.Errorf("new token after revoke: got %d, want 200", r.code)
	}
}

func TestSetAPIKey(t *testing.T) {
	e := newEnv(t)
	old := e.token(t)
	e.sim.SetAPIKey("rotated")
	wantFailure(t, e.do(t, "POST", "/v1/auth", jsonHdr, `{"api_secret_key":"`+testKey+`"}`), 401, "API Secret Key is invalid.")
	if r := e.do(t, "POST", "/v1/auth", jsonHdr, `{"api_secret_key":"rotated"}`); r.code != 200 {
		t.Errorf("new key: got %d %s, want 200", r.code, r.raw)
	}
	if r := e.do(t, "GET", "/v1/esign_templates", authHdr(old), ""); r.code != 200 {
		t.Errorf("token issued before rotation: got %d, want 200 (tokens outlive key rotation)", r.code)
	}
}
