// Package routetable holds the facts about the vendor's Customer API v1 and
// the gateway's request surface that configuration, policy, proxy and
// metrics share: the built-in route table and its route names, the methods
// the gateway forwards, the grammar of a route path's segments, the rule
// that keeps sensitive paths from being shadowed, and the request headers
// the gateway strips. Each exists once, here.
//
// It imports nothing above the base (the standard library and
// internal/base/ascii), so that every package of the module may import it
// (docs/architecture.md: the base layer).
package routetable

// Route is a named upstream route: its name, method and path pattern.
type Route struct {
	// Name is dotted lower-case words ("numbers.delete"); it is used as a
	// metric label.
	Name string
	// Method is one of Methods.
	Method string
	// Path is under /v1/; a segment {name} matches any one segment.
	Path string
}

// The names of the built-in routes (docs/callers-and-policy.md, Routes).
const (
	Auth                      = "auth" // the token endpoint, owned by the gateway
	ContactsCreate            = "contacts.create"
	ContactsDetails           = "contacts.details"
	ContactsList              = "contacts.list"
	ContactsUploadPatientDoc  = "contacts.upload_patient_doc"
	NumbersFilledRequirements = "numbers.filled_requirements"
	NumbersAvailableList      = "numbers.available_list"
	NumbersDelete             = "numbers.delete"
	EsignTemplatesList        = "esign.templates.list"
	EsignFieldRulesList       = "esign.field_rules.list"
	EsignFieldsCreate         = "esign.fields.create"
	EsignFieldsUpdate         = "esign.fields.update"
	EsignThemeDelete          = "esign.theme.delete"
)

// Route names that are not routes of the table but are used as route
// labels; no route may be named so.
const (
	// Unmatched names a path under /v1/ that matches no route.
	Unmatched = "unmatched"
	// Unknown names a path outside /v1/; it is never forwarded.
	Unknown = "unknown_route"
)

// Builtin returns the built-in route table: the 13 documented endpoints of
// the vendor's Customer API v1 that the gateway names, auth first, as
// docs/callers-and-policy.md lists them. Each call returns a new slice.
func Builtin() []Route {
	return []Route{
		{Name: Auth, Method: "POST", Path: "/v1/auth"},
		{Name: ContactsCreate, Method: "POST", Path: "/v1/contacts/create"},
		{Name: ContactsDetails, Method: "POST", Path: "/v1/contacts/details"},
		{Name: ContactsList, Method: "POST", Path: "/v1/contacts/list"},
		{Name: ContactsUploadPatientDoc, Method: "POST", Path: "/v1/contacts/upload-patient-doc"},
		{Name: NumbersFilledRequirements, Method: "POST", Path: "/v1/numbers/filled_requirements"},
		{Name: NumbersAvailableList, Method: "POST", Path: "/v1/numbers/available-list"},
		{Name: NumbersDelete, Method: "POST", Path: "/v1/numbers/delete"},
		{Name: EsignTemplatesList, Method: "GET", Path: "/v1/esign_templates"},
		{Name: EsignFieldRulesList, Method: "GET", Path: "/v1/esign_templates/{templateId}/field_rule"},
		{Name: EsignFieldsCreate, Method: "POST", Path: "/v1/esign_templates/{templateId}/fields"},
		{Name: EsignFieldsUpdate, Method: "PATCH", Path: "/v1/esign_templates/{templateId}/fields/{fieldTemplateId}"},
		{Name: EsignThemeDelete, Method: "DELETE", Path: "/v1/esign_templates/{templateId}/theme"},
	}
}

// ParamName returns the name of a parameter segment of a route path
// ("{templateId}" gives "templateId") and whether seg is one.
func ParamName(seg string) (string, bool) {
	if len(seg) >= 2 && seg[0] == '{' && seg[len(seg)-1] == '}' {
		return seg[1 : len(seg)-1], true
	}
	return "", false
}

// IsSegmentByte reports whether c may appear in a path segment the gateway
// forwards: [A-Za-z0-9_-] (docs/callers-and-policy.md). Route paths in the
// configuration and request paths at run time are held to the same set.
func IsSegmentByte(c byte) bool {
	return c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
