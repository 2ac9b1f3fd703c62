package tokencache

import "time"

// Token states of Status (docs/status-page.md).
const (
	StateValid    = "valid"    // a valid token is held and no renewal is under way
	StateRenewing = "renewing" // a renewal is in flight (requests without a valid token wait for it)
	StateFailing  = "failing"  // the last renewal failed; the current token still serves
	StateNone     = "none"     // no valid token and none coming now: requests get 503 token_unavailable
)

// Status is what the status page shows of the token: never its value.
type Status struct {
	// State is StateValid, StateRenewing, StateFailing or StateNone.
	State string
	// Valid: a token that may still be sent is held.
	Valid bool
	// Expiry is when the current token expires; zero when none is held.
	Expiry time.Time
	// Source is where the current token came from: "upstream" (renewed
	// by this replica) or "redis" (adopted from the shared store); "" when
	// none is held.
	Source string
	// LastRenewal is when the last renewal attempt ended and LastResult
	// how ("ok", "error" or "invalid_key"); zero and "" before the first.
	LastRenewal time.Time
	LastResult  string
	// InvalidKey: the upstream rejected the API secret key.
	InvalidKey bool
	// Unsynced: the token was renewed during a shared-store outage and is
	// not yet written back.
	Unsynced bool
}

// Status reports the token's state. It takes the manager's lock, which
// the request path never takes while a valid token is held: the admin
// listener may call it at any time.
func (m *Manager) Status() Status {
	now := m.opts.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.cur.Load()
	st := Status{LastRenewal: m.lastRenewal, LastResult: m.lastResult, InvalidKey: m.invalidKey,
		Unsynced: m.unsynced != nil}
	if t != nil {
		st.Expiry, st.Source = t.Expiry, m.source
	}
	st.Valid = t.Valid(now)
	switch {
	case m.fetching:
		st.State = StateRenewing
	case !st.Valid:
		st.State = StateNone
	case m.failing:
		st.State = StateFailing
	default:
		st.State = StateValid
	}
	return st
}
