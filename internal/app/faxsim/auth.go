package faxsim

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"
)

// Messages of the token endpoint and of the Bearer check. The first is the
// upstream's documented 401 body.
const (
	msgInvalidKey      = "API Secret Key is invalid."
	msgUnauthenticated = "Unauthenticated."
	msgTokenGenerated  = "Token generated successfully."
)

// accessToken is data of a successful POST /v1/auth.
type accessToken struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"`
}

// handleAuth exchanges the API key for a Bearer token (endpoint 1).
func (s *Sim) handleAuth(w http.ResponseWriter, c *call) {
	obj, isObject, err := decodeObject(c.body)
	if err != nil {
		writeFailure(w, http.StatusBadRequest, msgMalformedJSON)
		return
	}
	var key string
	if isObject {
		key, _ = obj.str("api_secret_key")
	}
	now := s.now()

	s.mu.Lock()
	valid := s.apiKey != "" && subtle.ConstantTimeCompare([]byte(key), []byte(s.apiKey)) == 1
	var tok string
	if valid {
		s.pruneLocked(now)
		// 32 random bytes give 43 URL-safe characters, as long as the real
		// tokens and unguessable.
		tok = randomID(32)
		s.issueLocked(tok, now.Add(s.ttl))
	}
	s.mu.Unlock()

	if !valid {
		// A missing key is an invalid key: the documented failure is the 401.
		writeFailure(w, http.StatusUnauthorized, msgInvalidKey)
		return
	}
	writeOK(w, msgTokenGenerated, accessToken{
		AccessToken: tok,
		TokenType:   "Bearer",
		ExpiresIn:   int64(s.ttl / time.Second),
	})
}

// bearer extracts the token from exactly one "Authorization: Bearer <token>"
// header: the word Bearer, one space, a token without spaces. Anything looser
// would let a gateway bug (lower-case scheme, two headers) pass unnoticed.
func bearer(h http.Header) (string, bool) {
	vals := h.Values("Authorization")
	if len(vals) != 1 {
		return "", false
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok || tok == "" || strings.ContainsAny(tok, " \t") {
		return "", false
	}
	return tok, true
}

// tokenValidLocked reports whether tok was issued, not revoked, and not yet
// expired by the injected clock. An expired token stays expired even if the
// clock is moved back, as a real one would.
func (s *Sim) tokenValidLocked(tok string, now time.Time) bool {
	exp, ok := s.tokens[tok]
	if !ok {
		return false
	}
	if !now.Before(exp) {
		delete(s.tokens, tok)
		return false
	}
	return true
}

// pruneLocked forgets expired tokens and finished rate windows, so a
// long-running simulator handed a token per test does not grow without bound.
func (s *Sim) pruneLocked(now time.Time) {
	for tok, exp := range s.tokens {
		if !now.Before(exp) {
			delete(s.tokens, tok)
		}
	}
	for k, rc := range s.rate {
		if !now.Before(rc.start.Add(rateWindow)) {
			delete(s.rate, k)
		}
	}
	s.forgetIssuedLocked(now)
}

// RevokeTokens invalidates every issued token, as if the upstream had
// rotated its signing key: the next resource call with any of them gets 401.
func (s *Sim) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok := range s.tokens {
		if rec := s.issued[tok]; rec != nil {
			rec.revoked = true
		}
	}
	clear(s.tokens)
}

// SetAPIKey rotates the valid api_secret_key. Tokens already issued stay
// valid until they expire, as they do upstream.
func (s *Sim) SetAPIKey(k string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiKey = k
}
