package tokencache_test

import (
	"errors"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"

	"github.com/faxgate/faxgate/tokencache"
)

// Status follows the token through its states as the status page shows
// them (docs/status-page.md): none before the first token, renewing while
// an attempt is in flight, valid, failing while renewal fails with the
// current token still good, none once it expired; the last renewal's time
// and result, and the source, go along.
func TestStatusFollowsTheToken(t *testing.T) {
	gate := make(chan struct{})
	fx := newFixture(t, 0, gate)
	if !waitFor(func() bool { return fx.m.Status().State == tokencache.StateRenewing }) {
		t.Fatalf("before the first token: %+v, want renewing", fx.m.Status())
	}
	if st := fx.m.Status(); st.Valid || !st.Expiry.IsZero() || st.Source != "" || st.LastResult != "" {
		t.Errorf("before the first token: %+v", st)
	}
	close(gate)
	fx.token(t)
	fx.sleeping(t)
	st := fx.m.Status()
	if st.State != tokencache.StateValid || !st.Valid || st.Source != "upstream" || st.LastResult != "ok" ||
		!st.LastRenewal.Equal(t0) || !st.Expiry.Equal(t0.Add(24*time.Hour)) {
		t.Errorf("with a token: %+v", st)
	}

	fx.fetch.setFailAll(errors.New("token endpoint down"))
	fx.clock.Advance(23 * time.Hour) // renewal due: it fails
	fx.sleeping(t)
	st = fx.m.Status()
	if st.State != tokencache.StateFailing || !st.Valid || st.LastResult != "error" || !st.LastRenewal.Equal(t0.Add(23*time.Hour)) ||
		st.Source != "upstream" {
		t.Errorf("while renewal fails: %+v, want failing with the renewal's time and error", st)
	}
	fx.clock.Advance(time.Hour) // past expiry
	if st := fx.m.Status(); st.State != tokencache.StateNone || st.Valid {
		t.Errorf("past expiry: %+v, want none", st)
	}
}

// An API key the upstream rejects shows as such.
func TestStatusInvalidKey(t *testing.T) {
	fx := newFixture(t, 0, nil, func(f *fakeFetcher) { f.failAll = tokencache.ErrInvalidKey })
	fx.sleeping(t)
	if st := fx.m.Status(); st.State != tokencache.StateNone || st.LastResult != "invalid_key" || !st.InvalidKey {
		t.Errorf("%+v, want none, invalid_key", st)
	}
}

func waitFor(ok func() bool) bool {
	return eventually.Wait(5*time.Second, func() error {
		if ok() {
			return nil
		}
		return errors.New("not yet")
	}) == nil
}
