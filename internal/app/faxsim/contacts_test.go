package faxsim

import (
	"bytes"
	"mime/multipart"
	"net/url"
	"regexp"
	"slices"
	"testing"
)

func TestContactCreate(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	post := func(t *testing.T, body string) response {
		t.Helper()
		return e.do(t, "POST", "/v1/contacts/create", authHdr(tok), body)
	}

	t.Run("success is stored", func(t *testing.T) {
		r := post(t, `{"type":"individual","is_organization":false,"first_name":"Grace","last_name":"Hopper",
			"email":"grace@example.com","fax_number":"+12025550143","dob":"1906-12-09","gender":"female"}`)
		if want := `{"status":1,"message":"Contact created successfully."}`; r.code != 200 || r.raw != want {
			t.Fatalf("got %d %s, want 200 %s", r.code, r.raw, want)
		}
		list := dataList(t, e.do(t, "POST", "/v1/contacts/list", authHdr(tok), `{}`))
		last := list[len(list)-1]
		if last["first_name"] != "Grace" || last["last_name"] != "Hopper" || last["phone_number"] != "12025550143" || last["type"] != "individual" {
			t.Errorf("last listed contact: got %v, want Grace Hopper 12025550143 individual", last)
		}
		d := e.do(t, "POST", "/v1/contacts/details", authHdr(tok), `{"id":"`+last["id"].(string)+`"}`)
		wantOK(t, d, "Contact details fetched successfully.")
		if data, _ := d.body["data"].(map[string]any); data["first_name"] != "Grace" {
			t.Errorf("details of created contact: got %s", d.raw)
		}
	})

	t.Run("organization needs no person name", func(t *testing.T) {
		r := post(t, `{"is_organization":true,"type":"organization"}`)
		if r.code != 200 {
			t.Errorf("got %d %s, want 200", r.code, r.raw)
		}
	})

	failures := []struct {
		name, body, wantData string
	}{
		{"body not an object", `["Grace"]`, "The contact must be a JSON object."},
		{"no name", `{"type":"individual","email":"a@example.com"}`, "The first name field is required when last name is not present."},
		{"blank names", `{"first_name":" ","last_name":""}`, "The first name field is required when last name is not present."},
		{"is_organization not boolean", `{"first_name":"A","is_organization":"yes"}`, "The is organization field must be true or false."},
		{"first_name not a string", `{"first_name":5}`, "The first name must be a string."},
		{"bad email", `{"first_name":"A","email":"not-an-email"}`, "The email must be a valid email address."},
		{"fax without plus", `{"first_name":"A","fax_number":"14155550100"}`, "The fax number format is invalid."},
		{"bad dob", `{"first_name":"A","dob":"1990-13-45"}`, "The dob does not match the format Y-m-d."},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, tc.body)
			want := `{"data":` + quote(tc.wantData) + `}`
			if r.code != 422 || r.raw != want {
				t.Errorf("got %d %s, want 422 %s", r.code, r.raw, want)
			}
		})
	}
	t.Run("malformed JSON", func(t *testing.T) {
		wantFailure(t, post(t, `{"first_name":`), 400, "The request body is not valid JSON.")
	})
}

func TestContactDetails(t *testing.T) {
	e := newEnv(t)
	seedID := seedID("contact-0001")
	tests := []struct {
		name, body string
		wantCode   int
		wantMsg    string
	}{
		{"seeded contact", `{"id":"` + seedID + `"}`, 200, "Contact details fetched successfully."},
		{"unknown id", `{"id":"bm9wZQ"}`, 404, "Contact not found."},
		{"missing id", `{}`, 422, "The id field is required."},
		{"null id", `{"id":null}`, 422, "The id field is required."},
		{"id not a string", `{"id":7}`, 422, "The id must be a string."},
		{"body not an object", `[1]`, 422, "The request body must be a JSON object."},
		{"malformed JSON", `{`, 400, "The request body is not valid JSON."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.api(t, "POST", "/v1/contacts/details", tc.body)
			if tc.wantCode != 200 {
				wantFailure(t, r, tc.wantCode, tc.wantMsg)
				return
			}
			wantOK(t, r, tc.wantMsg)
			want := `{"status":1,"message":"Contact details fetched successfully.","data":{"id":"` + seedID +
				`","is_organization":false,"first_name":"Ada","last_name":"Lovelace","type":"individual"}}`
			if r.raw != want {
				t.Errorf("got %s, want %s", r.raw, want)
			}
		})
	}
}

func TestContactListShape(t *testing.T) {
	e := newEnv(t)
	r := e.api(t, "POST", "/v1/contacts/list", `{}`)
	wantOK(t, r, "Contacts fetched successfully.")
	list := dataList(t, r)
	if len(list) != 2 {
		t.Fatalf("seeded contacts: got %d, want 2", len(list))
	}
	wantKeys := []string{"contact_documents", "created_at", "fields", "first_name", "groups", "id", "is_blocked",
		"is_favorite", "is_organization", "last_name", "phone_number", "type", "updated_at"}
	stamp := regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$`)
	for i, c := range list {
		var keys []string
		for k := range c {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, wantKeys) {
			t.Errorf("contact %d keys: got %v, want %v", i, keys, wantKeys)
		}
		for _, k := range []string{"created_at", "updated_at"} {
			if s, _ := c[k].(string); !stamp.MatchString(s) {
				t.Errorf("contact %d %s: got %q, want like 2024-05-01T10:20:30.123456Z", i, k, s)
			}
		}
		if p, _ := c["phone_number"].(string); !regexp.MustCompile(`^\d+$`).MatchString(p) {
			t.Errorf("contact %d phone_number: got %q, want digits only", i, p)
		}
		for _, k := range []string{"contact_documents", "fields", "groups"} {
			if a, ok := c[k].([]any); !ok || len(a) != 0 {
				t.Errorf("contact %d %s: got %v, want []", i, k, c[k])
			}
		}
	}
	if got := list[0]["created_at"]; got != "2024-05-01T10:20:30.123456Z" {
		t.Errorf("first seed created_at: got %v", got)
	}
	if got := list[1]["is_organization"]; got != true {
		t.Errorf("second seed is_organization: got %v, want true", got)
	}
	t.Run("empty body is the empty object", func(t *testing.T) {
		if r := e.api(t, "POST", "/v1/contacts/list", ""); r.code != 200 {
			t.Errorf("got %d %s, want 200", r.code, r.raw)
		}
	})
}

func TestContactListPaging(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	for _, n := range []string{"C", "D", "E"} {
		if r := e.do(t, "POST", "/v1/contacts/create", authHdr(tok), `{"first_name":"`+n+`"}`); r.code != 200 {
			t.Fatalf("create: got %d %s", r.code, r.raw)
		}
	}
	var ids []string
	pages := 0
	cursor := ""
	for {
		q := url.Values{"limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := e.do(t, "POST", "/v1/contacts/list?"+q.Encode(), authHdr(tok), `{}`)
		list := dataList(t, r)
		if len(list) > 2 {
			t.Fatalf("page %d: got %d items, want at most 2", pages, len(list))
		}
		for _, c := range list {
			ids = append(ids, c["id"].(string))
		}
		pages++
		meta, _ := r.body["meta"].(map[string]any)
		next, _ := meta["next_cursor"].(string)
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		cursor = next
	}
	if pages != 3 || len(ids) != 5 {
		t.Errorf("got %d pages and %d contacts, want 3 pages and 5 contacts", pages, len(ids))
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
		t.Errorf("a contact appeared twice: %v", ids)
	}

	bad := []struct{ name, query, msg string }{
		{"limit not a number", "limit=abc", "The limit must be an integer."},
		{"limit empty", "limit=", "The limit must be an integer."},
		{"limit zero", "limit=0", "The limit must be at least 1."},
		{"cursor garbage", "cursor=%21%21", "The cursor is invalid."},
		{"cursor not ours", "cursor=" + seedID("page-2"), "The cursor is invalid."},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			wantFailure(t, e.do(t, "POST", "/v1/contacts/list?"+tc.query, authHdr(tok), `{}`), 422, tc.msg)
		})
	}
	t.Run("large limit is capped, not refused", func(t *testing.T) {
		r := e.do(t, "POST", "/v1/contacts/list?limit=1000", authHdr(tok), `{}`)
		if got := len(dataList(t, r)); got != 5 {
			t.Errorf("got %d contacts, want 5", got)
		}
	})
}

// multipartBody builds a form from name/value pairs.
func multipartBody(t *testing.T, parts ...string) (string, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i < len(parts); i += 2 {
		if err := mw.WriteField(parts[i], parts[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String(), mw.FormDataContentType()
}

func TestUploadPatientDoc(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	upload := func(t *testing.T, ctype, body string) response {
		t.Helper()
		return e.do(t, "POST", "/v1/contacts/upload-patient-doc", map[string]string{
			"Authorization": "Bearer " + tok, "Content-Type": ctype}, body)
	}
	t.Run("success", func(t *testing.T) {
		body, ctype := multipartBody(t, "file_name", "scan.pdf", "file_data", "JVBERi0xLjQK")
		r := upload(t, ctype, body)
		wantOK(t, r, "Patient document uploaded successfully.")
		data, _ := r.body["data"].(map[string]any)
		if data["file_name"] != "scan.pdf" || data["size"] != float64(12) || data["id"] == "" {
			t.Errorf("data: got %v, want file_name scan.pdf, size 12 and an id", data)
		}
	})
	t.Run("file part accepted too", func(t *testing.T) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		_ = mw.WriteField("file_name", "a.pdf")
		fw, _ := mw.CreateFormFile("file_data", "a.pdf")
		_, _ = fw.Write([]byte("%PDF-1.4"))
		_ = mw.Close()
		if r := upload(t, mw.FormDataContentType(), b.String()); r.code != 200 {
			t.Errorf("got %d %s, want 200", r.code, r.raw)
		}
	})

	failures := []struct {
		name  string
		parts []string
		code  int
		msg   string
	}{
		{"file_name missing", []string{"file_data", "abc"}, 422, "The file name field is required."},
		{"file_name blank", []string{"file_name", " ", "file_data", "abc"}, 422, "The file name field is required."},
		{"file_data missing", []string{"file_name", "a.pdf"}, 422, "The file data field is required."},
		{"both missing", nil, 422, "The file name field is required."},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			body, ctype := multipartBody(t, tc.parts...)
			wantFailure(t, upload(t, ctype, body), tc.code, tc.msg)
		})
	}
	t.Run("JSON is not multipart", func(t *testing.T) {
		wantFailure(t, upload(t, "application/json", `{"file_name":"a","file_data":"b"}`), 400, "The request must be multipart/form-data.")
	})
	t.Run("multipart without boundary", func(t *testing.T) {
		wantFailure(t, upload(t, "multipart/form-data", "x"), 400, "The request must be multipart/form-data.")
	})
	t.Run("truncated multipart", func(t *testing.T) {
		body, ctype := multipartBody(t, "file_name", "a.pdf", "file_data", "abc")
		wantFailure(t, upload(t, ctype, body[:len(body)/2]), 400, "The request body is not valid multipart/form-data.")
	})
}
