package policy

import (
	"testing"

	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy/route"
)

// newTestTable is the built-in routes plus one extra, faxes.send.
func newTestTable(t testing.TB) *route.Table {
	t.Helper()
	tab, err := route.NewTable([]config.Route{{Name: "faxes.send", Method: "POST", Path: "/v1/faxes/send"}}, false)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	return tab
}

func newTestPolicy(t testing.TB, sensitive []string, callers ...config.Caller) *Policy {
	t.Helper()
	tab := newTestTable(t)
	p, err := NewPolicy(callers, config.Policy{Sensitive: sensitive, Confirm: []string{"numbers.delete"}, AuthEndpoint: "deny"}, tab)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

func TestDecide(t *testing.T) {
	callers := []config.Caller{
		{Name: "star", Allow: []string{"*"}},
		{Name: "exact", Allow: []string{"numbers.delete"}},
		{Name: "glob", Allow: []string{"numbers.*"}},
		{Name: "esign", Allow: []string{"esign.*", "contacts.list"}},
		{Name: "sneaky", Allow: []string{"numbers.delet?", "numbers.[d]elete", "*.delete", `numbers\.delete`, "numbers.delete*"}},
		{Name: "none"},
		{Name: "both", Allow: []string{"*", "numbers.delete"}},
		{Name: "unm", Allow: []string{"unmatched"}},
	}
	def := []string{"numbers.delete"}
	for _, tc := range []struct {
		name      string
		sensitive []string
		caller    string
		route     string
		want      Decision
	}{
		{"star grants ordinary route", def, "star", "contacts.list", Decision{Allowed: true}},
		{"star grants extra", def, "star", "faxes.send", Decision{Allowed: true}},
		{"star grants unmatched", def, "star", "unmatched", Decision{Allowed: true}},
		{"star never grants numbers.delete", def, "star", "numbers.delete", Decision{Sensitive: true, Confirm: true}},
		{"exact grant", def, "exact", "numbers.delete", Decision{Allowed: true, Sensitive: true, Confirm: true}},
		{"exact grants nothing else", def, "exact", "numbers.available_list", Decision{}},
		{"exact does not grant unmatched", def, "exact", "unmatched", Decision{}},
		{"glob grants sibling", def, "glob", "numbers.available_list", Decision{Allowed: true}},
		{"glob skips sensitive", def, "glob", "numbers.delete", Decision{Sensitive: true, Confirm: true}},
		{"glob grants numbers.delete when not sensitive", nil, "glob", "numbers.delete", Decision{Allowed: true, Confirm: true}},
		{"star grants numbers.delete when not sensitive", nil, "star", "numbers.delete", Decision{Allowed: true, Confirm: true}},
		{"glob does not grant unmatched", def, "glob", "unmatched", Decision{}},
		{"glob does not cross prefix", def, "glob", "contacts.list", Decision{}},
		{"esign glob spans dots", def, "esign", "esign.fields.update", Decision{Allowed: true}},
		{"esign exact entry", def, "esign", "contacts.list", Decision{Allowed: true}},
		{"esign no other", def, "esign", "contacts.create", Decision{}},
		{"glob lookalikes never grant sensitive", def, "sneaky", "numbers.delete", Decision{Sensitive: true, Confirm: true}},
		{"glob lookalike grants when not sensitive", nil, "sneaky", "numbers.delete", Decision{Allowed: true, Confirm: true}},
		{"no allow", def, "none", "contacts.list", Decision{}},
		{"star plus exact", def, "both", "numbers.delete", Decision{Allowed: true, Sensitive: true, Confirm: true}},
		{"unmatched by name", def, "unm", "unmatched", Decision{Allowed: true}},
		{"sensitive unmatched needs exact", []string{"unmatched", "numbers.delete"}, "star", "unmatched", Decision{Sensitive: true}},
		{"sensitive unmatched exact", []string{"unmatched"}, "unm", "unmatched", Decision{Allowed: true, Sensitive: true}},
		{"sensitive extra", []string{"faxes.send"}, "star", "faxes.send", Decision{Sensitive: true}},
		{"unknown caller sensitive route", def, "nobody", "numbers.delete", Decision{Sensitive: true, Confirm: true}},
		{"unknown caller ordinary route", def, "nobody", "contacts.list", Decision{}},
		{"empty caller", def, "", "contacts.list", Decision{}},
		{"unknown route", def, "star", "no.such.route", Decision{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPolicy(t, tc.sensitive, callers...)
			tc.want.AuditIDs = AuditCarriesIDs(tc.route, tc.want) // compiled into every decision
			if got := p.Decide(tc.caller, tc.route); got != tc.want {
				t.Errorf("Decide(%q, %q) = %+v, want %+v", tc.caller, tc.route, got, tc.want)
			}
		})
	}
}

// TestDecideEveryRouteThroughResolve: whatever spelling reaches the
// numbers.delete path, a "*" caller is never allowed it.
func TestDecideEveryRouteThroughResolve(t *testing.T) {
	tab := newTestTable(t)
	p := newTestPolicy(t, []string{"numbers.delete"}, config.Caller{Name: "star", Allow: []string{"*"}})
	for _, method := range []string{"POST", "GET", "PUT", "DELETE", "PATCH"} {
		for _, uri := range []string{"/v1/numbers/delete", "/V1/Numbers/DELETE/", "/v1/NUMBERS/delete?x=1"} {
			tg, err := tab.Resolve(method, uri)
			if err != nil {
				t.Fatalf("Resolve(%s %s): %v", method, uri, err)
			}
			if d := p.Decide("star", tg.Route); d.Allowed || !d.Sensitive {
				t.Errorf("%s %s -> %s: %+v", method, uri, tg.Route, d)
			}
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	p := newTestPolicy(b, []string{"numbers.delete"},
		config.Caller{Name: "intake", Allow: []string{"*"}},
		config.Caller{Name: "billing", Allow: []string{"numbers.*", "numbers.delete"}})
	b.ReportAllocs()
	for b.Loop() {
		p.Decide("intake", "contacts.list")
		p.Decide("billing", "numbers.delete")
		p.Decide("nobody", "numbers.delete")
	}
}
