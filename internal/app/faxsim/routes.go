package faxsim

import (
	"net/http"
	"slices"
	"strings"
)

// handlerFunc answers one authenticated (or public) request on a matched route.
type handlerFunc func(s *Sim, w http.ResponseWriter, c *call)

// route is one path template and the methods it answers.
type route struct {
	template string
	methods  map[string]handlerFunc
	allow    string // the Allow header for a 405
	public   bool   // needs no Bearer token (only the token endpoint)
}

// routeTable matches raw request paths to routes. It is built per Sim and
// never changes afterwards.
type routeTable struct {
	static map[string]*route
	// esign holds the templated routes under /v1/esign_templates/{templateId}/,
	// keyed by the path shape after the template id ("field_rule", "fields",
	// "fields/*", "theme").
	esign map[string]*route
}

func newRoute(template string, public bool, methods map[string]handlerFunc) *route {
	allow := make([]string, 0, len(methods)+1)
	for m := range methods {
		allow = append(allow, m)
		if m == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	slices.Sort(allow)
	return &route{template: template, methods: methods, allow: strings.Join(allow, ", "), public: public}
}

func newRouteTable() routeTable {
	post := func(h handlerFunc) map[string]handlerFunc { return map[string]handlerFunc{http.MethodPost: h} }
	static := []*route{
		newRoute("/v1/auth", true, post((*Sim).handleAuth)),
		newRoute("/v1/contacts/create", false, post((*Sim).handleContactCreate)),
		newRoute("/v1/contacts/details", false, post((*Sim).handleContactDetails)),
		newRoute("/v1/contacts/list", false, post((*Sim).handleContactList)),
		newRoute("/v1/contacts/upload-patient-doc", false, post((*Sim).handleUploadPatientDoc)),
		newRoute("/v1/numbers/filled_requirements", false, post((*Sim).handleFilledRequirements)),
		newRoute("/v1/numbers/available-list", false, post((*Sim).handleAvailableList)),
		newRoute("/v1/numbers/delete", false, post((*Sim).handleNumberDelete)),
		newRoute("/v1/esign_templates", false, map[string]handlerFunc{http.MethodGet: (*Sim).handleTemplateList}),
		// Undocumented upstream endpoints the gateway must still carry: a
		// several-MB JSON body, and a DELETE with a JSON body.
		newRoute("/v1/faxes/send", false, post((*Sim).handleFaxSend)),
		newRoute("/v1/faxes/delete", false, map[string]handlerFunc{http.MethodDelete: (*Sim).handleFaxDelete}),
	}
	t := routeTable{static: make(map[string]*route, len(static)), esign: make(map[string]*route)}
	for _, rt := range static {
		t.static[rt.template] = rt
	}
	const base = "/v1/esign_templates/{templateId}"
	t.esign["field_rule"] = newRoute(base+"/field_rule", false, map[string]handlerFunc{http.MethodGet: (*Sim).handleFieldRules})
	t.esign["fields"] = newRoute(base+"/fields", false, post((*Sim).handleFieldsCreate))
	t.esign["fields/*"] = newRoute(base+"/fields/{fieldTemplateId}", false, map[string]handlerFunc{http.MethodPatch: (*Sim).handleFieldsUpdate})
	t.esign["theme"] = newRoute(base+"/theme", false, map[string]handlerFunc{http.MethodDelete: (*Sim).handleThemeDelete})
	return t
}

// match finds the route for a raw path. Matching is exact and case-sensitive
// on purpose: the gateway forwards canonical spellings, and a simulator that
// cleaned paths itself would hide a gateway that forwarded a dirty one.
func (t routeTable) match(path string) (*route, []string) {
	if rt, ok := t.static[path]; ok {
		return rt, nil
	}
	rest, ok := strings.CutPrefix(path, "/v1/esign_templates/")
	if !ok {
		return nil, nil
	}
	seg := strings.Split(rest, "/")
	for _, s := range seg {
		if s == "" {
			return nil, nil
		}
	}
	switch {
	case len(seg) == 2 && seg[1] == "field_rule":
		return t.esign["field_rule"], seg[:1]
	case len(seg) == 2 && seg[1] == "fields":
		return t.esign["fields"], seg[:1]
	case len(seg) == 3 && seg[1] == "fields":
		return t.esign["fields/*"], []string{seg[0], seg[2]}
	case len(seg) == 2 && seg[1] == "theme":
		return t.esign["theme"], seg[:1]
	}
	return nil, nil
}

// rawPath is the request path exactly as it arrived on the wire. Go's server
// decodes the path into r.URL and re-escapes it in EscapedPath, which can
// differ from what the client sent, so the request-target itself is used when
// there is one (requests built in tests and handed to ServeHTTP have none).
func rawPath(r *http.Request) string {
	u := r.RequestURI
	if u == "" {
		return r.URL.EscapedPath()
	}
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u = u[:i]
	}
	if strings.HasPrefix(u, "/") {
		return u
	}
	// Absolute-form ("http://host/path"): keep the path part. Anything else
	// (authority-form, "*") is recorded as it came.
	if i := strings.Index(u, "://"); i >= 0 {
		rest := u[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			return rest[j:]
		}
		return ""
	}
	return u
}
