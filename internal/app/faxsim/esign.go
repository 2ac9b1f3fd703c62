package faxsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
)

// Messages of the e-signature template endpoints. Their response bodies are
// undocumented upstream; these follow the envelope of the documented ones.
const (
	msgTemplatesFetched  = "Templates fetched successfully."
	msgFieldRulesFetched = "Field rules fetched successfully."
	msgFieldsCreated     = "Template fields created successfully."
	msgFieldsUpdated     = "Template fields updated successfully."
	msgThemeDeleted      = "Template theme deleted successfully."
	msgTemplateNotFound  = "Template not found."
	msgFieldNotFound     = "Field not found."
	msgFieldsArray       = "The fields must be an array."
)

// maxFields bounds one create or update request.
const maxFields = 500

// template is one e-signature template.
type template struct {
	id       string
	name     string
	hasTheme bool
	fields   []*templateField // creation order
}

// templateField keeps the client's properties raw: their full set and units
// are not documented, so the simulator stores and returns what it was given.
type templateField struct {
	id    string
	props map[string]json.RawMessage
}

// MarshalJSON renders the field as its properties plus its id.
func (f *templateField) MarshalJSON() ([]byte, error) {
	m := maps.Clone(f.props)
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	m["id"], _ = json.Marshal(f.id)
	return json.Marshal(m)
}

// snapshot copies f so it can be encoded after the lock is released, while
// later updates change the original.
func (f *templateField) snapshot() *templateField {
	return &templateField{id: f.id, props: maps.Clone(f.props)}
}

func (t *template) field(id string) *templateField {
	for _, f := range t.fields {
		if f.id == id {
			return f
		}
	}
	return nil
}

// seedTemplates stores template "tpl_1" with one required field "fld_1".
func (s *Sim) seedTemplates() {
	raw := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	s.templates = map[string]*template{"tpl_1": {
		id: "tpl_1", name: "Patient intake consent", hasTheme: true,
		fields: []*templateField{{id: "fld_1", props: map[string]json.RawMessage{
			"type": raw("text"), "title": raw("Patient name"), "page": raw(1),
			"x_position": raw(72), "y_position": raw(144), "width": raw(200), "height": raw(24),
			"required": raw(true),
		}}},
	}}
	s.templateIDs = []string{"tpl_1"}
	s.fieldSeq = 1
}

// templateSummary is one element of the templates list.
type templateSummary struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	HasTheme bool   `json:"has_theme"`
}

// handleTemplateList lists templates (endpoint 9).
func (s *Sim) handleTemplateList(w http.ResponseWriter, _ *call) {
	s.mu.Lock()
	out := make([]templateSummary, 0, len(s.templateIDs))
	for _, id := range s.templateIDs {
		t := s.templates[id]
		out = append(out, templateSummary{ID: t.id, Name: t.name, HasTheme: t.hasTheme})
	}
	s.mu.Unlock()
	writeOK(w, msgTemplatesFetched, out)
}

// fieldRule is one element of the field rules list: one "required" rule per
// required field, so rules follow the fields clients create.
type fieldRule struct {
	ID      string `json:"id"`
	FieldID string `json:"field_id"`
	Rule    string `json:"rule"`
}

// handleFieldRules lists a template's field rules (endpoint 10).
func (s *Sim) handleFieldRules(w http.ResponseWriter, c *call) {
	s.mu.Lock()
	t := s.templates[c.params[0]]
	rules := []fieldRule{}
	if t != nil {
		for _, f := range t.fields {
			if string(f.props["required"]) == "true" {
				rules = append(rules, fieldRule{ID: "rule_" + f.id, FieldID: f.id, Rule: "required"})
			}
		}
	}
	s.mu.Unlock()
	if t == nil {
		writeFailure(w, http.StatusNotFound, msgTemplateNotFound)
		return
	}
	writeOK(w, msgFieldRulesFetched, rules)
}

// handleFieldsCreate adds fields to a template (endpoint 11).
func (s *Sim) handleFieldsCreate(w http.ResponseWriter, c *call) {
	if !s.templateExists(w, c.params[0]) {
		return
	}
	obj, ok := jsonObject(w, c)
	if !ok {
		return
	}
	entries, msg := fieldEntries(obj)
	for i := 0; msg == "" && i < len(entries); i++ {
		msg = checkFieldProps(i, entries[i])
	}
	if msg != "" {
		writeFailure(w, http.StatusUnprocessableEntity, msg)
		return
	}

	s.mu.Lock()
	t := s.templates[c.params[0]]
	var created []*templateField
	if t != nil { // templates cannot be deleted, but stay correct if they could
		for _, e := range entries {
			s.fieldSeq++
			delete(e, "id") // ids are the simulator's to give
			f := &templateField{id: "fld_" + strconv.Itoa(s.fieldSeq), props: e}
			t.fields = append(t.fields, f)
			created = append(created, f.snapshot())
		}
	}
	s.mu.Unlock()
	if t == nil {
		writeFailure(w, http.StatusNotFound, msgTemplateNotFound)
		return
	}
	writeOK(w, msgFieldsCreated, created)
}

// handleFieldsUpdate changes fields of a template (endpoint 12). The path's
// field must exist; each entry names the field it changes by id. Whether the
// two must agree is undocumented, so they need not. Nothing changes unless
// every entry is valid.
func (s *Sim) handleFieldsUpdate(w http.ResponseWriter, c *call) {
	tplID, pathField := c.params[0], c.params[1]
	if !s.templateExists(w, tplID) {
		return
	}
	obj, ok := jsonObject(w, c)
	if !ok {
		return
	}
	entries, msg := fieldEntries(obj)
	ids := make([]string, len(entries))
	for i := 0; msg == "" && i < len(entries); i++ {
		id, p := object(entries[i]).str("id")
		switch p {
		case absent:
			msg = msgRequired(fmt.Sprintf("fields.%d.id", i))
		case wrongType:
			msg = msgString(fmt.Sprintf("fields.%d.id", i))
		default:
			ids[i] = id
			msg = checkFieldProps(i, entries[i])
		}
	}
	if msg != "" {
		writeFailure(w, http.StatusUnprocessableEntity, msg)
		return
	}

	updated, code, msg := s.updateFields(tplID, pathField, ids, entries)
	if msg != "" {
		writeFailure(w, code, msg)
		return
	}
	writeOK(w, msgFieldsUpdated, updated)
}

// updateFields applies validated update entries under the lock and returns
// snapshots of the changed fields, or the failure to answer with.
func (s *Sim) updateFields(tplID, pathField string, ids []string, entries []map[string]json.RawMessage) ([]*templateField, int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.templates[tplID]
	if t == nil || t.field(pathField) == nil {
		return nil, http.StatusNotFound, msgFieldNotFound
	}
	for i, id := range ids {
		if t.field(id) == nil {
			return nil, http.StatusUnprocessableEntity, fmt.Sprintf("The selected fields.%d.id is invalid.", i)
		}
	}
	updated := make([]*templateField, 0, len(entries))
	for i, e := range entries {
		f := t.field(ids[i])
		delete(e, "id")
		if f.props == nil {
			f.props = map[string]json.RawMessage{}
		}
		maps.Copy(f.props, e)
		updated = append(updated, f.snapshot())
	}
	return updated, 0, ""
}

// handleThemeDelete removes a template's theme (endpoint 13). It is
// idempotent: a template without a theme is already in the asked-for state.
func (s *Sim) handleThemeDelete(w http.ResponseWriter, c *call) {
	s.mu.Lock()
	t := s.templates[c.params[0]]
	if t != nil {
		t.hasTheme = false
	}
	s.mu.Unlock()
	if t == nil {
		writeFailure(w, http.StatusNotFound, msgTemplateNotFound)
		return
	}
	writeOK(w, msgThemeDeleted, nil)
}

// templateExists answers 404 itself when the template is unknown. Checking
// before the body mirrors route-model binding upstream: a wrong id is a 404
// whatever the body says.
func (s *Sim) templateExists(w http.ResponseWriter, id string) bool {
	s.mu.Lock()
	_, ok := s.templates[id]
	s.mu.Unlock()
	if !ok {
		writeFailure(w, http.StatusNotFound, msgTemplateNotFound)
	}
	return ok
}

// fieldEntries checks that "fields" is a non-empty array of objects and
// returns them decoded; msg is the first problem, if any.
func fieldEntries(obj object) (entries []map[string]json.RawMessage, msg string) {
	raw, ok := obj["fields"]
	if !ok || jsonKind(raw) == 'n' {
		return nil, msgRequired("fields")
	}
	if jsonKind(raw) != '[' {
		return nil, msgFieldsArray
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, msgFieldsArray
	}
	if len(items) == 0 {
		return nil, msgRequired("fields")
	}
	if len(items) > maxFields {
		return nil, fmt.Sprintf("The fields must not have more than %d items.", maxFields)
	}
	for i, it := range items {
		var m map[string]json.RawMessage
		if jsonKind(it) != '{' || json.Unmarshal(it, &m) != nil {
			return nil, fmt.Sprintf("The fields.%d must be an object.", i)
		}
		entries = append(entries, m)
	}
	return entries, ""
}

// fieldPropKinds are the documented template field properties and their
// JSON types; other properties are kept unchecked.
var fieldPropKinds = []struct{ name, kind string }{
	{"linked_field_id", "string"},
	{"type", "string"},
	{"title", "string"},
	{"user_role_id", "integer"},
	{"page", "integer"},
	{"x_position", "number"},
	{"y_position", "number"},
	{"height", "number"},
	{"width", "number"},
	{"required", "boolean"},
}

// checkFieldProps type-checks entry i's documented properties; null means
// "not given".
func checkFieldProps(i int, e map[string]json.RawMessage) string {
	for _, pk := range fieldPropKinds {
		raw, ok := e[pk.name]
		if !ok || jsonKind(raw) == 'n' {
			continue
		}
		attr := fmt.Sprintf("fields.%d.%s", i, pk.name)
		k := jsonKind(raw)
		switch pk.kind {
		case "string":
			if k != '"' {
				return msgString(attr)
			}
		case "integer":
			if !isInteger(raw) {
				return "The " + words(attr) + " must be an integer."
			}
			if n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64); pk.name == "page" && (err != nil || n < 1) {
				return "The " + words(attr) + " must be at least 1."
			}
		case "number":
			if k != '0' {
				return "The " + words(attr) + " must be a number."
			}
		case "boolean":
			if k != 't' && k != 'f' {
				return "The " + words(attr) + " field must be true or false."
			}
		}
	}
	return ""
}
