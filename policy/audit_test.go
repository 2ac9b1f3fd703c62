package policy

import (
	"testing"

	"github.com/faxgate/faxgate/internal/config"
)

func TestAuditCarriesIDs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route string
		base  Decision
		want  bool
	}{
		{"numbers.delete, sensitive and confirmed", "numbers.delete", Decision{Sensitive: true, Confirm: true}, true},
		{"numbers.delete, sensitive but not confirmed", "numbers.delete", Decision{Sensitive: true}, true},
		{"another confirmed sensitive route", "numbers.purge", Decision{Sensitive: true, Confirm: true}, true},
		{"a sensitive route not confirmed", "faxes.send", Decision{Sensitive: true}, false},
		{"numbers.delete not sensitive: no audit line", "numbers.delete", Decision{Confirm: true}, false},
		{"a confirmed route not sensitive: no audit line", "numbers.purge", Decision{Confirm: true}, false},
		{"an unknown route", "nowhere", Decision{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AuditCarriesIDs(tc.route, tc.base); got != tc.want {
				t.Errorf("AuditCarriesIDs(%q, %+v) = %v, want %v", tc.route, tc.base, got, tc.want)
			}
		})
	}
}

// The default policy (numbers.delete sensitive and confirmed) audits the
// delete with its IDs, and nothing else.
func TestAuditCarriesIDsUnderTheDefaultPolicy(t *testing.T) {
	p := newTestPolicy(t, []string{"numbers.delete"}, config.Caller{Name: "ops", Allow: []string{"numbers.delete"}})
	for route, want := range map[string]bool{"numbers.delete": true, "contacts.list": false, "unmatched": false} {
		if got := AuditCarriesIDs(route, p.Base(route)); got != want {
			t.Errorf("%s: AuditCarriesIDs = %v, want %v", route, got, want)
		}
	}
}
