package faxsim

import "time"

// TokenStats counts the Bearer tokens that requests presented, by what the
// simulator knew of each one when the request arrived: what a test of a
// token cache judges it by (a cache must never send a token the upstream
// did not issue, or one that has expired).
type TokenStats struct {
	// Valid: issued here, not revoked, not expired.
	Valid int `json:"valid"`
	// Revoked: issued, then revoked (RevokeTokens, POST /_sim/revoke).
	Revoked int `json:"revoked"`
	// Expired: issued, and past its expiry.
	Expired int `json:"expired"`
	// Unknown: not issued by this simulator, or expired so long ago
	// (issuedMemory) that it was forgotten.
	Unknown int `json:"unknown"`
	// Distinct is how many distinct issued tokens were presented.
	Distinct int `json:"distinct"`
}

// issuedMemory is how long after its expiry an issued token is still
// recognised (as expired): long enough for any test, short enough that a
// simulator running for weeks does not grow.
const issuedMemory = time.Hour

// issuedToken is what the simulator remembers of a token it issued.
type issuedToken struct {
	expiry    time.Time
	revoked   bool
	presented bool
}

// TokenStats returns the counts since the start or the last Reset.
func (s *Sim) TokenStats() TokenStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenStats
}

// countTokenLocked classifies a presented Bearer token.
func (s *Sim) countTokenLocked(tok string, now time.Time) {
	rec, ok := s.issued[tok]
	switch {
	case !ok:
		s.tokenStats.Unknown++
		return
	case rec.revoked:
		s.tokenStats.Revoked++
	case !now.Before(rec.expiry):
		s.tokenStats.Expired++
	default:
		s.tokenStats.Valid++
	}
	if !rec.presented {
		rec.presented = true
		s.tokenStats.Distinct++
	}
}

// issueLocked records a token just issued.
func (s *Sim) issueLocked(tok string, expiry time.Time) {
	s.tokens[tok] = expiry
	s.issued[tok] = &issuedToken{expiry: expiry}
}

// forgetIssuedLocked drops tokens expired more than issuedMemory ago.
func (s *Sim) forgetIssuedLocked(now time.Time) {
	for tok, rec := range s.issued {
		if now.Sub(rec.expiry) > issuedMemory {
			delete(s.issued, tok)
		}
	}
}
