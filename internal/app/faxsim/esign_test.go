package faxsim

import (
	"testing"
)

func TestTemplateList(t *testing.T) {
	e := newEnv(t)
	r := e.api(t, "GET", "/v1/esign_templates", "")
	want := `{"status":1,"message":"Templates fetched successfully.","data":[{"id":"tpl_1","name":"Patient intake consent","has_theme":true}]}`
	if r.code != 200 || r.raw != want {
		t.Errorf("got %d %s, want 200 %s", r.code, r.raw, want)
	}
}

func TestFieldRules(t *testing.T) {
	e := newEnv(t)
	r := e.api(t, "GET", "/v1/esign_templates/tpl_1/field_rule", "")
	want := `{"status":1,"message":"Field rules fetched successfully.","data":[{"id":"rule_fld_1","field_id":"fld_1","rule":"required"}]}`
	if r.code != 200 || r.raw != want {
		t.Errorf("got %d %s, want 200 %s", r.code, r.raw, want)
	}
}

func TestFieldsCreate(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	post := func(t *testing.T, body string) response {
		t.Helper()
		return e.do(t, "POST", "/v1/esign_templates/tpl_1/fields", authHdr(tok), body)
	}
	t.Run("success stores fields with ids", func(t *testing.T) {
		r := post(t, `{"fields":[
			{"linked_field_id":"lf_1","type":"text","title":"Signature","user_role_id":2,"page":1,
			 "x_position":10.5,"y_position":20,"height":30,"width":100,"required":true},
			{"type":"text","title":"Date","id":"client-chosen"}]}`)
		wantOK(t, r, "Template fields created successfully.")
		list := dataList(t, r)
		if len(list) != 2 || list[0]["id"] != "fld_2" || list[1]["id"] != "fld_3" {
			t.Fatalf("created ids: got %s, want fld_2 and fld_3", r.raw)
		}
		if list[0]["title"] != "Signature" || list[0]["x_position"] != 10.5 || list[0]["required"] != true {
			t.Errorf("stored properties: got %v", list[0])
		}
		rules := dataList(t, e.do(t, "GET", "/v1/esign_templates/tpl_1/field_rule", authHdr(tok), ""))
		if len(rules) != 2 || rules[1]["field_id"] != "fld_2" {
			t.Errorf("rules after creating a required field: got %v, want fld_1 and fld_2", rules)
		}
	})
	failures := []struct{ name, body, msg string }{
		{"fields missing", `{}`, "The fields field is required."},
		{"fields null", `{"fields":null}`, "The fields field is required."},
		{"fields empty", `{"fields":[]}`, "The fields field is required."},
		{"fields not an array", `{"fields":{"title":"x"}}`, "The fields must be an array."},
		{"element not an object", `{"fields":[{"title":"a"},"b"]}`, "The fields.1 must be an object."},
		{"title not a string", `{"fields":[{"title":1}]}`, "The fields.0.title must be a string."},
		{"page not an integer", `{"fields":[{"page":1.5}]}`, "The fields.0.page must be an integer."},
		{"page zero", `{"fields":[{"page":0}]}`, "The fields.0.page must be at least 1."},
		{"user_role_id string", `{"fields":[{"user_role_id":"2"}]}`, "The fields.0.user role id must be an integer."},
		{"x_position string", `{"fields":[{"x_position":"10"}]}`, "The fields.0.x position must be a number."},
		{"required string", `{"fields":[{"required":"yes"}]}`, "The fields.0.required field must be true or false."},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) { wantFailure(t, post(t, tc.body), 422, tc.msg) })
	}
	t.Run("failures stored nothing", func(t *testing.T) {
		r := post(t, `{"fields":[{"title":"after"}]}`)
		if list := dataList(t, r); len(list) != 1 || list[0]["id"] != "fld_4" {
			t.Errorf("got %s, want one field fld_4", r.raw)
		}
	})
}

func TestFieldsUpdate(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	patch := func(t *testing.T, path, body string) response {
		t.Helper()
		return e.do(t, "PATCH", path, authHdr(tok), body)
	}
	t.Run("success", func(t *testing.T) {
		r := patch(t, "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"id":"fld_1","title":"Full name","required":false}]}`)
		wantOK(t, r, "Template fields updated successfully.")
		list := dataList(t, r)
		if len(list) != 1 || list[0]["id"] != "fld_1" || list[0]["title"] != "Full name" || list[0]["type"] != "text" {
			t.Errorf("updated field: got %s, want fld_1 titled Full name, type kept", r.raw)
		}
		rules := e.do(t, "GET", "/v1/esign_templates/tpl_1/field_rule", authHdr(tok), "")
		if got := dataList(t, rules); len(got) != 0 {
			t.Errorf("rules after making fld_1 optional: got %v, want none", got)
		}
	})
	tests := []struct {
		name, path, body string
		code             int
		msg              string
	}{
		{"unknown field in path", "/v1/esign_templates/tpl_1/fields/fld_99", `{"fields":[{"id":"fld_1","title":"x"}]}`, 404, "Field not found."},
		{"unknown id in body", "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"id":"fld_1"},{"id":"fld_99","title":"x"}]}`, 422, "The selected fields.1.id is invalid."},
		{"id missing", "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"title":"x"}]}`, 422, "The fields.0.id field is required."},
		{"id not a string", "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"id":1}]}`, 422, "The fields.0.id must be a string."},
		{"fields missing", "/v1/esign_templates/tpl_1/fields/fld_1", `{}`, 422, "The fields field is required."},
		{"title not a string", "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"id":"fld_1","title":false}]}`, 422, "The fields.0.title must be a string."},
		{"malformed JSON", "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":`, 400, "The request body is not valid JSON."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantFailure(t, patch(t, tc.path, tc.body), tc.code, tc.msg) })
	}
	t.Run("a failed update changes nothing", func(t *testing.T) {
		r := patch(t, "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"id":"fld_1","title":"kept"}]}`)
		if list := dataList(t, r); list[0]["title"] != "kept" {
			t.Fatalf("got %s", r.raw)
		}
		patch(t, "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"id":"fld_1","title":"lost"},{"id":"nope"}]}`)
		r = patch(t, "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"id":"fld_1"}]}`)
		if list := dataList(t, r); list[0]["title"] != "kept" {
			t.Errorf("title after a rejected update: got %v, want kept", list[0]["title"])
		}
	})
}

func TestThemeDelete(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	for _, name := range []string{"first", "again (idempotent)"} {
		t.Run(name, func(t *testing.T) {
			r := e.do(t, "DELETE", "/v1/esign_templates/tpl_1/theme", authHdr(tok), "")
			if want := `{"status":1,"message":"Template theme deleted successfully."}`; r.code != 200 || r.raw != want {
				t.Errorf("got %d %s, want 200 %s", r.code, r.raw, want)
			}
		})
	}
	list := dataList(t, e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""))
	if list[0]["has_theme"] != false {
		t.Errorf("has_theme after delete: got %v, want false", list[0]["has_theme"])
	}
}

func TestUnknownTemplate(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	tests := []struct{ method, path, body string }{
		{"GET", "/v1/esign_templates/tpl_9/field_rule", ""},
		{"POST", "/v1/esign_templates/tpl_9/fields", `{"fields":[{"title":"x"}]}`},
		{"POST", "/v1/esign_templates/tpl_9/fields", `not even JSON`},
		{"PATCH", "/v1/esign_templates/tpl_9/fields/fld_1", `{"fields":[{"id":"fld_1"}]}`},
		{"DELETE", "/v1/esign_templates/tpl_9/theme", ""},
		{"DELETE", "/v1/esign_templates/TPL_1/theme", ""}, // ids are case-sensitive
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			wantFailure(t, e.do(t, tc.method, tc.path, authHdr(tok), tc.body), 404, "Template not found.")
		})
	}
}
