package route

import (
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/config"
)

// testExtras exercise extras: plain, oddly cased, fixed-vs-parameter
// priority and backtracking out of a fixed branch.
var testExtras = []config.Route{
	{Name: "faxes.send", Method: "POST", Path: "/v1/faxes/send"},
	{Name: "workspace.info", Method: "GET", Path: "/v1/Workspace/Info"},
	// A fixed segment where esign_templates has {templateId}: fixed wins.
	{Name: "esign.special.theme", Method: "GET", Path: "/v1/esign_templates/special/theme"},
	// A fixed segment with no "theme" below it: /v1/esign_templates/archive/theme
	// must fall back to the parameter route.
	{Name: "esign.archive", Method: "GET", Path: "/v1/esign_templates/archive"},
	// Two methods on one path.
	{Name: "documents.get", Method: "GET", Path: "/v1/documents/{documentId}"},
	{Name: "documents.delete", Method: "DELETE", Path: "/v1/documents/{id}"},
}

func newTestTable(t testing.TB, unmatchedDeny bool) *Table {
	t.Helper()
	tab, err := NewTable(testExtras, unmatchedDeny)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	return tab
}

type resolveCase struct {
	name   string
	method string // "POST" when empty
	uri    string
	// want on success
	route, path, query string
	methodOK           bool
	// want on failure
	code string
}

// ok builds a successful case.
func ok(name, method, uri, route, path, query string, methodOK bool) resolveCase {
	return resolveCase{name: name, method: method, uri: uri, route: route, path: path, query: query, methodOK: methodOK}
}

// fail builds a refused case.
func fail(name, uri, code string) resolveCase {
	return resolveCase{name: name, uri: uri, code: code}
}

const (
	del  = "numbers.delete"
	unm  = RouteUnmatched
	iP   = CodeInvalidPath
	iR   = CodeInvalidRequest
	uR   = CodeUnknownRoute
	post = "POST"
	get  = "GET"
)

var resolveCases = []resolveCase{
	// Every built-in route in its own spelling.
	ok("auth", post, "/v1/auth", "auth", "/v1/auth", "", true),
	ok("contacts.create", post, "/v1/contacts/create", "contacts.create", "/v1/contacts/create", "", true),
	ok("contacts.details", post, "/v1/contacts/details", "contacts.details", "/v1/contacts/details", "", true),
	ok("contacts.list", post, "/v1/contacts/list", "contacts.list", "/v1/contacts/list", "", true),
	ok("contacts.upload_patient_doc", post, "/v1/contacts/upload-patient-doc", "contacts.upload_patient_doc", "/v1/contacts/upload-patient-doc", "", true),
	ok("numbers.filled_requirements", post, "/v1/numbers/filled_requirements", "numbers.filled_requirements", "/v1/numbers/filled_requirements", "", true),
	ok("numbers.available_list", post, "/v1/numbers/available-list", "numbers.available_list", "/v1/numbers/available-list", "", true),
	ok("numbers.delete", post, "/v1/numbers/delete", del, "/v1/numbers/delete", "", true),
	ok("esign.templates.list", get, "/v1/esign_templates", "esign.templates.list", "/v1/esign_templates", "", true),
	ok("esign.field_rules.list", get, "/v1/esign_templates/T1/field_rule", "esign.field_rules.list", "/v1/esign_templates/T1/field_rule", "", true),
	ok("esign.fields.create", post, "/v1/esign_templates/T1/fields", "esign.fields.create", "/v1/esign_templates/T1/fields", "", true),
	ok("esign.fields.update", "PATCH", "/v1/esign_templates/T1/fields/F-2_x", "esign.fields.update", "/v1/esign_templates/T1/fields/F-2_x", "", true),
	ok("esign.theme.delete", "DELETE", "/v1/esign_templates/ABC/theme", "esign.theme.delete", "/v1/esign_templates/ABC/theme", "", true),

	// Case and one trailing slash are ignored; the table's spelling is sent.
	ok("upper case", post, "/V1/NUMBERS/DELETE", del, "/v1/numbers/delete", "", true),
	ok("upper case trailing slash", post, "/V1/NUMBERS/DELETE/", del, "/v1/numbers/delete", "", true),
	ok("mixed case", post, "/v1/Numbers/Delete", del, "/v1/numbers/delete", "", true),
	ok("trailing slash", post, "/v1/numbers/delete/", del, "/v1/numbers/delete", "", true),
	ok("auth upper case", post, "/V1/AUTH", "auth", "/v1/auth", "", true),
	ok("auth trailing slash", post, "/v1/auth/", "auth", "/v1/auth", "", true),
	ok("auth with query", post, "/v1/Auth?x=1", "auth", "/v1/auth", "x=1", true),
	ok("param keeps caller's case", get, "/V1/ESIGN_TEMPLATES/AbC/FIELD_RULE/", "esign.field_rules.list", "/v1/esign_templates/AbC/field_rule", "", true),
	ok("param that looks like a route word", "DELETE", "/v1/esign_templates/delete/theme", "esign.theme.delete", "/v1/esign_templates/delete/theme", "", true),

	// Sensitivity follows the path: other methods still name the route.
	ok("GET on numbers.delete", get, "/v1/numbers/delete", del, "/v1/numbers/delete", "", false),
	ok("DELETE on numbers.delete", "DELETE", "/v1/numbers/delete", del, "/v1/numbers/delete", "", false),
	ok("lower-case method is another method", "post", "/v1/numbers/delete", del, "/v1/numbers/delete", "", false),
	ok("GET on auth", get, "/v1/auth", "auth", "/v1/auth", "", false),
	ok("POST on theme", post, "/v1/esign_templates/x/theme", "esign.theme.delete", "/v1/esign_templates/x/theme", "", false),

	// Extras.
	ok("extra", post, "/v1/faxes/send", "faxes.send", "/v1/faxes/send", "", true),
	ok("extra any case", post, "/V1/FAXES/SEND/", "faxes.send", "/v1/faxes/send", "", true),
	ok("extra canonical spelling kept", get, "/v1/workspace/info", "workspace.info", "/v1/Workspace/Info", "", true),
	ok("extra canonical spelling kept upper", get, "/V1/WORKSPACE/INFO", "workspace.info", "/v1/Workspace/Info", "", true),
	ok("fixed beats parameter", get, "/v1/esign_templates/special/theme", "esign.special.theme", "/v1/esign_templates/special/theme", "", true),
	ok("fixed beats parameter any case", get, "/v1/esign_templates/SPECIAL/theme", "esign.special.theme", "/v1/esign_templates/special/theme", "", true),
	ok("fixed path, other method stays fixed", "DELETE", "/v1/esign_templates/special/theme", "esign.special.theme", "/v1/esign_templates/special/theme", "", false),
	ok("backtrack from fixed to parameter", "DELETE", "/v1/esign_templates/archive/theme", "esign.theme.delete", "/v1/esign_templates/archive/theme", "", true),
	ok("fixed leaf", get, "/v1/esign_templates/archive", "esign.archive", "/v1/esign_templates/archive", "", true),
	ok("shared path picks method GET", get, "/v1/documents/d1", "documents.get", "/v1/documents/d1", "", true),
	ok("shared path picks method DELETE", "DELETE", "/v1/documents/d1", "documents.delete", "/v1/documents/d1", "", true),
	ok("shared path, no such method", "PUT", "/v1/Documents/d1/", "documents.get", "/v1/documents/d1", "", false),

	// Unmatched: under /v1/ but in no route.
	ok("unmatched", get, "/v1/workspace", unm, "/v1/workspace", "", true),
	ok("unmatched deeper", post, "/v1/numbers/delete/now", unm, "/v1/numbers/delete/now", "", true),
	ok("unmatched prefix only", post, "/v1/numbers", unm, "/v1/numbers", "", true),
	ok("unmatched keeps case after v1", get, "/V1/Fax/Inbox/", unm, "/v1/Fax/Inbox", "", true),
	ok("v1 alone", get, "/v1", unm, "/v1", "", true),
	ok("v1 slash", get, "/v1/", unm, "/v1", "", true),
	ok("V1 alone", get, "/V1", unm, "/v1", "", true),
	ok("numbers delete lookalike name", post, "/v1/numbers/delete_", unm, "/v1/numbers/delete_", "", true),
	ok("numbers delete with dash", post, "/v1/numbers/delete-", unm, "/v1/numbers/delete-", "", true),
	ok("too many params", get, "/v1/esign_templates/a/fields/b/c", unm, "/v1/esign_templates/a/fields/b/c", "", true),

	// Queries are forwarded unchanged.
	ok("query", post, "/v1/contacts/list?page=2&per_page=10", "contacts.list", "/v1/contacts/list", "page=2&per_page=10", true),
	ok("query with escapes", post, "/v1/contacts/list?q=a%20b%2Fc&x=%ZZ", "contacts.list", "/v1/contacts/list", "q=a%20b%2Fc&x=%ZZ", true),
	ok("empty query", post, "/v1/contacts/list?", "contacts.list", "/v1/contacts/list", "", true),
	ok("query after trailing slash", post, "/v1/contacts/list/?a=1", "contacts.list", "/v1/contacts/list", "a=1", true),
	ok("query with slash and dots", get, "/v1/esign_templates?next=/v1/../numbers/delete", "esign.templates.list", "/v1/esign_templates", "next=/v1/../numbers/delete", true),
	ok("query value method is fine", get, "/v1/esign_templates?sort=method", "esign.templates.list", "/v1/esign_templates", "sort=method", true),
	ok("query key method is fine", get, "/v1/esign_templates?method=x&http_method=y", "esign.templates.list", "/v1/esign_templates", "method=x&http_method=y", true),
	ok("query second question mark", get, "/v1/esign_templates?a=?", "esign.templates.list", "/v1/esign_templates", "a=?", true),

	// Not origin-form.
	fail("absolute-form", "http://x/v1/numbers/delete", iP),
	fail("absolute-form https", "https://api.example.com/v1/auth", iP),
	fail("authority-form", "example.com:443", iP),
	fail("asterisk-form", "*", iP),
	fail("relative path", "v1/numbers/delete", iP),
	fail("query only", "?a=1", iP),
	fail("empty", "", uR),

	// Percent-encoding anywhere in the path.
	fail("encoded slash upper", "/v1/numbers%2Fdelete", iP),
	fail("encoded slash lower", "/v1/numbers%2fdelete", iP),
	fail("encoded dot", "/v1/numbers/%2e%2e/numbers/delete", iP),
	fail("encoded dot segment", "/v1/x/%2e/numbers/delete", iP),
	fail("double-encoded slash", "/v1/numbers%252Fdelete", iP),
	fail("encoded letter", "/v1/numbers/d%65lete", iP),
	fail("encoded space suffix", "/v1/numbers/delete%20", iP),
	fail("encoded NUL", "/v1/numbers/delete%00", iP),
	fail("encoded v1", "/%76%31/numbers/delete", iP),
	fail("lone percent", "/v1/numbers/delete%", iP),

	// Dot segments.
	fail("dot dot", "/v1/x/../numbers/delete", iP),
	fail("dot", "/v1/numbers/./delete", iP),
	fail("trailing dot", "/v1/numbers/delete/.", iP),
	fail("trailing dot slash", "/v1/numbers/delete/./", iP),
	fail("trailing dot dot", "/v1/numbers/delete/..", iP),
	fail("leading dot dot", "/../v1/numbers/delete", iP),
	fail("dot suffix", "/v1/numbers/delete.", iP),
	fail("extension", "/v1/numbers/delete.json", iP),
	fail("triple dot", "/v1/numbers/.../delete", iP),

	// Backslashes, empty segments, parameters.
	fail("backslash", "/v1/numbers\\delete", iP),
	fail("backslash leading", "\\v1\\numbers\\delete", iP),
	fail("backslash trailing", "/v1/numbers/delete\\", iP),
	fail("leading double slash", "//v1/numbers/delete", iP),
	fail("double slash inside", "/v1//numbers/delete", iP),
	fail("double slash trailing", "/v1/numbers/delete//", iP),
	fail("double slash only", "//", iP),
	fail("triple slash", "///", iP),
	fail("v1 double slash", "/v1//", iP),
	fail("semicolon", "/v1/numbers/delete;x", iP),
	fail("semicolon segment", "/v1/numbers;/delete", iP),
	fail("semicolon jsessionid", "/v1/numbers/delete;jsessionid=1", iP),
	fail("matrix on v1", "/v1;a=b/numbers/delete", iP),

	// Control, space and non-ASCII bytes.
	fail("NUL", "/v1/numbers/delete\x00", iP),
	fail("tab", "/v1/numbers/delete\t", iP),
	fail("space", "/v1/numbers/delete ", iP),
	fail("CR LF", "/v1/numbers/delete\r\nX: y", iP),
	fail("DEL", "/v1/numbers/delete\x7f", iP),
	fail("Cyrillic e", "/v1/numbers/d\u0435lete", iP),
	fail("fullwidth slash", "/v1/numbers\uff0fdelete", iP),
	fail("fullwidth letters", "/v1/\uff4eumbers/delete", iP),
	fail("Kelvin sign", "/v1/esign_templates/\u212a/theme", iP),
	fail("dotless i", "/v1/numbers/delet\u0131", iP),
	fail("overlong slash", "/v1/numbers\xc0\xafdelete", iP),
	fail("latin-1 byte", "/v1/numbers/delete\xe9", iP),

	// Other characters outside [A-Za-z0-9_-].
	fail("tilde", "/v1/~numbers/delete", iP),
	fail("colon", "/v1/numbers:delete", iP),
	fail("at", "/v1/numbers/delete@x", iP),
	fail("plus", "/v1/numbers/delete+", iP),
	fail("comma", "/v1/numbers/delete,", iP),
	fail("equals", "/v1/numbers/delete=", iP),
	fail("parenthesis", "/v1/numbers/delete()", iP),
	fail("star", "/v1/numbers/*", iP),
	fail("brace template", "/v1/esign_templates/{templateId}/theme", iP),

	// Fragments.
	fail("fragment", "/v1/numbers/delete#x", iP),
	fail("fragment after query", "/v1/contacts/list?a=1#x", iP),
	fail("fragment only", "#", iP),

	// Outside /v1/.
	fail("root", "/", uR),
	fail("root query", "/?a=1", uR),
	fail("no version", "/numbers/delete", uR),
	fail("v2", "/v2/numbers/delete", uR),
	fail("v10", "/v10/numbers/delete", uR),
	fail("v1 suffix", "/v1x/numbers/delete", uR),
	fail("v1 dash", "/v1-/numbers/delete", uR),
	fail("metrics", "/metrics", uR),
	fail("api prefix", "/api/v1/numbers/delete", uR),

	// Queries that could change the method or the request line.
	fail("_method", "/v1/numbers/delete?_method=DELETE", iR),
	fail("_method upper", "/v1/contacts/list?_METHOD=GET", iR),
	fail("_method second", "/v1/contacts/list?a=1&_method=GET", iR),
	fail("_method no value", "/v1/contacts/list?_method", iR),
	fail("_method empty value", "/v1/contacts/list?_method=", iR),
	fail("_method after semicolon", "/v1/contacts/list?a=1;_method=GET", iR),
	fail("%5Fmethod", "/v1/contacts/list?%5Fmethod=x", iR),
	fail("%5fMETHOD", "/v1/contacts/list?%5fMETHOD=x", iR),
	fail("fully encoded", "/v1/contacts/list?%5F%6D%65%74%68%6F%64=x", iR),
	fail("double encoded", "/v1/contacts/list?%255Fmethod=x", iR),
	fail("array", "/v1/contacts/list?_method[]=DELETE", iR),
	fail("array encoded", "/v1/contacts/list?_method%5B%5D=DELETE", iR),
	fail("PHP dot mangling", "/v1/contacts/list?.method=DELETE", iR),
	fail("PHP space mangling", "/v1/contacts/list?+method=DELETE", iR),
	fail("leading space", "/v1/contacts/list?%20_method=DELETE", iR),
	fail("NUL truncation", "/v1/contacts/list?_method%00x=DELETE", iR),
	fail("query NUL", "/v1/contacts/list?a=\x00", iR),
	fail("query space", "/v1/contacts/list?a=b c", iR),
	fail("query tab", "/v1/contacts/list?a=\t", iR),
	fail("query CR LF", "/v1/contacts/list?a=1\r\nHost: evil", iR),
	fail("query DEL", "/v1/contacts/list?a=\x7f", iR),
	fail("query non-ASCII", "/v1/contacts/list?q=\u00e9", iR),
}

func TestResolve(t *testing.T) {
	tab := newTestTable(t, false)
	for _, tc := range resolveCases {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = post
			}
			got, err := tab.Resolve(method, tc.uri)
			if tc.code != "" {
				if err == nil {
					t.Fatalf("Resolve(%q) = %+v, want error %s", tc.uri, got, tc.code)
				}
				if err.Code != tc.code {
					t.Fatalf("Resolve(%q) error = %v, want code %s", tc.uri, err, tc.code)
				}
				if got != (Target{}) {
					t.Errorf("Resolve(%q) returned %+v beside its error", tc.uri, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q) error = %v, want route %s", tc.uri, err, tc.route)
			}
			want := Target{Route: tc.route, Path: tc.path, RawQuery: tc.query, MethodOK: tc.methodOK}
			if got != want {
				t.Errorf("Resolve(%s %q)\n got %+v\nwant %+v", method, tc.uri, got, want)
			}
		})
	}
}

func TestResolveCaseCount(t *testing.T) {
	// The table above is the catalogue of known bypasses; keep it large.
	if n := len(resolveCases); n < 60 {
		t.Errorf("only %d resolve cases", n)
	}
}

func TestResolveErrorStatus(t *testing.T) {
	tab := newTestTable(t, false)
	for _, tc := range []struct {
		uri    string
		status int
		code   string
	}{
		{"/v1/numbers/../auth", 400, iP},
		{"/v1/a?_method=x", 400, iR},
		{"/other", 404, uR},
	} {
		_, err := tab.Resolve(post, tc.uri)
		if err == nil || err.Status != tc.status || err.Code != tc.code {
			t.Errorf("Resolve(%q) = %v, want %d %s", tc.uri, err, tc.status, tc.code)
		}
	}
}

// TestResolveMessagesDoNotEcho: error messages are logged and shown to the
// caller, so they must not carry the caller's path or query.
func TestResolveMessagesDoNotEcho(t *testing.T) {
	tab := newTestTable(t, false)
	const secret = "SECRETsecret"
	for _, uri := range []string{
		"/v1/" + secret + "%2F",
		"/v1/" + secret + ".x",
		"/v1/x?" + secret + "=\x00",
		"/v1/x?_method=" + secret,
		"/" + secret,
		"http://" + secret,
		"/v1/" + secret + "#",
	} {
		_, err := tab.Resolve(post, uri)
		if err == nil {
			t.Fatalf("Resolve(%q) succeeded", uri)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Resolve(%q) error echoes input: %q", uri, err.Error())
		}
	}
}

func TestResolveUnmatchedDeny(t *testing.T) {
	tab := newTestTable(t, true)
	for _, uri := range []string{"/v1", "/v1/", "/v1/workspace", "/V1/numbers/delete/now"} {
		if got, err := tab.Resolve(get, uri); err == nil || err.Code != uR || err.Status != 404 {
			t.Errorf("Resolve(%q) with unmatched deny = %+v, %v; want 404 unknown_route", uri, got, err)
		}
	}
	// Routes still resolve.
	if got, err := tab.Resolve(post, "/v1/numbers/delete"); err != nil || got.Route != del {
		t.Errorf("numbers.delete with unmatched deny = %+v, %v", got, err)
	}
}

func TestRoutes(t *testing.T) {
	tab := newTestTable(t, false)
	rs := tab.Routes()
	if len(rs) != 13+len(testExtras) {
		t.Fatalf("Routes() has %d routes, want %d", len(rs), 13+len(testExtras))
	}
	if rs[0].Name != "auth" || rs[13].Name != testExtras[0].Name {
		t.Errorf("Routes() order: first %q, 14th %q", rs[0].Name, rs[13].Name)
	}
	rs[0].Name = "changed"
	if tab.Routes()[0].Name != "auth" {
		t.Error("Routes() shares its slice with the table")
	}
	// Every listed route resolves to itself from its own path.
	for _, r := range tab.Routes() {
		p := strings.NewReplacer("{templateId}", "t", "{fieldTemplateId}", "f", "{documentId}", "d", "{id}", "d").Replace(r.Path)
		got, err := tab.Resolve(r.Method, p)
		if err != nil || got.Route != r.Name || !got.MethodOK || got.Path != p {
			t.Errorf("Resolve(%s %s) = %+v, %v; want route %s", r.Method, p, got, err, r.Name)
		}
	}
}

func BenchmarkResolve(b *testing.B) {
	tab := newTestTable(b, false)
	for _, bc := range []struct{ name, method, uri string }{
		{"static", "POST", "/v1/contacts/list"},
		{"static-query", "POST", "/v1/contacts/list?page=2&per_page=50"},
		{"upper-trailing", "POST", "/V1/NUMBERS/DELETE/"},
		{"param", "PATCH", "/v1/esign_templates/tpl-123/fields/f-456"},
		{"unmatched", "GET", "/v1/faxes/inbox/list"},
		{"invalid", "POST", "/v1/numbers/%2e%2e/delete"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tab.Resolve(bc.method, bc.uri)
			}
		})
	}
}
