package faxsim

import (
	"bufio"
	"encoding/base64"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestWrongMethod(t *testing.T) {
	e := newEnv(t)
	tests := []struct{ method, path, allow string }{
		{"GET", "/v1/auth", "POST"},
		{"GET", "/v1/numbers/delete", "POST"},
		{"DELETE", "/v1/numbers/delete", "POST"},
		{"PUT", "/v1/contacts/create", "POST"},
		{"POST", "/v1/esign_templates", "GET, HEAD"},
		{"POST", "/v1/esign_templates/tpl_1/field_rule", "GET, HEAD"},
		{"GET", "/v1/esign_templates/tpl_1/fields", "POST"},
		{"POST", "/v1/esign_templates/tpl_1/fields/fld_1", "PATCH"},
		{"GET", "/v1/esign_templates/tpl_1/theme", "DELETE"},
		{"POST", "/v1/faxes/delete", "DELETE"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			// No token: the method is refused at routing, before auth.
			r := e.do(t, tc.method, tc.path, nil, "")
			wantFailure(t, r, 405, "Method not allowed.")
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow: got %q, want %q", got, tc.allow)
			}
		})
	}
	t.Run("HEAD on a GET route", func(t *testing.T) {
		if r := e.do(t, "HEAD", "/v1/esign_templates", authHdr(e.token(t)), ""); r.code != 200 {
			t.Errorf("got %d, want 200", r.code)
		}
	})
}

func TestUnknownPaths(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	tests := []struct {
		name, method, path string
		auth               bool
		code               int
		msg                string
	}{
		{"unknown /v1 path with token", "GET", "/v1/faxes/status", true, 404, "Not found."},
		{"unknown /v1 path without token", "GET", "/v1/faxes/status", false, 401, "Unauthenticated."},
		{"outside /v1", "GET", "/healthz", false, 404, "Not found."},
		{"root", "GET", "/", false, 404, "Not found."},
		{"trailing slash is not cleaned", "POST", "/v1/numbers/delete/", true, 404, "Not found."},
		{"case is not folded", "POST", "/V1/Numbers/Delete", true, 404, "Not found."},
		{"empty segment", "POST", "/v1/numbers//delete", true, 404, "Not found."},
		{"extension", "POST", "/v1/numbers/delete.json", true, 404, "Not found."},
		{"esign base with slash", "GET", "/v1/esign_templates/", true, 404, "Not found."},
		{"esign too deep", "PATCH", "/v1/esign_templates/tpl_1/fields/fld_1/x", true, 404, "Not found."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.sim.Reset()
			var hdr map[string]string
			if tc.auth {
				hdr = authHdr(tok)
			}
			wantFailure(t, e.do(t, tc.method, tc.path, hdr, `{"number_id":"num_1001","order_id":"ord_5001"}`), tc.code, tc.msg)
			counts := e.sim.RouteCounts()
			if got := counts[tc.method+" other"]; got != 1 {
				t.Errorf("RouteCounts: got %v, want %q counted once", counts, tc.method+" other")
			}
		})
	}
	if got := len(e.sim.OwnedNumbers()); got != 3 {
		t.Errorf("owned numbers after odd paths: got %d, want 3 (none deleted)", got)
	}
}

// rawRequest writes one request by hand, so the request-target reaches the
// simulator exactly as written.
func rawRequest(t *testing.T, e *env, head string) int {
	t.Helper()
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRecordsRawRequests(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	host := e.srv.Listener.Addr().String()
	tests := []struct {
		name, target, wantPath, wantQuery, wantCount string
		wantCode                                     int
	}{
		{"encoded letter stays encoded", "/v1/numbers/%64elete", "/v1/numbers/%64elete", "", "POST other", 404},
		{"encoded slash", "/v1/esign_templates/tpl%2F1/theme", "/v1/esign_templates/tpl%2F1/theme", "", "POST /v1/esign_templates/{templateId}/theme", 405},
		{"braces Go would re-escape", "/v1/esign_templates/{templateId}/theme", "/v1/esign_templates/{templateId}/theme", "", "POST /v1/esign_templates/{templateId}/theme", 405},
		{"dot segments", "/v1/x/../numbers/delete", "/v1/x/../numbers/delete", "", "POST other", 404},
		{"query kept raw", "/v1/contacts/list?limit=1&cursor=%41", "/v1/contacts/list", "limit=1&cursor=%41", "POST /v1/contacts/list", 422},
		{"absolute-form", "http://" + host + "/v1/contacts/list?limit=1", "/v1/contacts/list", "limit=1", "POST /v1/contacts/list", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.sim.Reset()
			code := rawRequest(t, e, "POST "+tc.target+" HTTP/1.1\r\nHost: "+host+
				"\r\nAuthorization: Bearer "+tok+"\r\nX-Request-Id: rid-1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
			if code != tc.wantCode {
				t.Errorf("status: got %d, want %d", code, tc.wantCode)
			}
			recs := e.sim.Requests()
			if len(recs) != 1 {
				t.Fatalf("recorded %d requests, want 1", len(recs))
			}
			rec := recs[0]
			if rec.Path != tc.wantPath || rec.RawQuery != tc.wantQuery {
				t.Errorf("recorded path %q query %q, want %q %q", rec.Path, rec.RawQuery, tc.wantPath, tc.wantQuery)
			}
			if rec.Method != "POST" || rec.Header.Get("X-Request-Id") != "rid-1" || rec.Header.Get("Authorization") != "Bearer "+tok ||
				string(rec.Body) != "{}" || rec.BodySize != 2 || rec.Host != host {
				t.Errorf("recorded %+v, want POST with X-Request-Id, Authorization, Host and body {}", rec)
			}
			if !rec.Time.Equal(e.clock.Now()) {
				t.Errorf("recorded time %v, want the injected clock's %v", rec.Time, e.clock.Now())
			}
			if got := e.sim.RouteCounts()[tc.wantCount]; got != 1 {
				t.Errorf("RouteCounts: got %v, want %q once", e.sim.RouteCounts(), tc.wantCount)
			}
		})
	}
	t.Run("recorded before auth", func(t *testing.T) {
		e.sim.Reset()
		e.do(t, "POST", "/v1/numbers/delete", map[string]string{"Authorization": "Bearer wrong"}, `{}`)
		recs := e.sim.Requests()
		if len(recs) != 1 || recs[0].Header.Get("Authorization") != "Bearer wrong" {
			t.Errorf("got %+v, want the unauthenticated request recorded", recs)
		}
	})
	t.Run("copies cannot alter history", func(t *testing.T) {
		recs := e.sim.Requests()
		recs[0].Header.Set("Authorization", "changed")
		recs[0].Body[0] = 'X'
		again := e.sim.Requests()
		if again[0].Header.Get("Authorization") != "Bearer wrong" || again[0].Body[0] != '{' {
			t.Errorf("history changed through a returned copy: %+v", again[0])
		}
	})
}

func TestRequestRing(t *testing.T) {
	sim := New(Options{APIKey: testKey})
	for i := range ringSize + 5 {
		req, _ := http.NewRequest("GET", "/v1/r"+strconv.Itoa(i), nil)
		sim.ServeHTTP(discard{}, req)
	}
	recs := sim.Requests()
	if len(recs) != ringSize {
		t.Fatalf("kept %d, want %d", len(recs), ringSize)
	}
	if recs[0].Path != "/v1/r5" || recs[ringSize-1].Path != "/v1/r1004" {
		t.Errorf("oldest %q newest %q, want /v1/r5 and /v1/r1004", recs[0].Path, recs[ringSize-1].Path)
	}
}

// discard is a ResponseWriter that drops the response.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func TestFaxSendBigBody(t *testing.T) {
	e := newEnv(t)
	pdf := []byte("%PDF-1.4\n" + strings.Repeat("x", 2<<20))
	body := `{"to_number":"+14155550100","file_data":"` + base64.StdEncoding.EncodeToString(pdf) + `"}`
	r := e.api(t, "POST", "/v1/faxes/send", body)
	wantOK(t, r, "Fax queued successfully.")
	data, _ := r.body["data"].(map[string]any)
	if id, _ := data["job_id"].(string); !strings.HasPrefix(id, "job_") {
		t.Errorf("job_id: got %v, want job_...", data["job_id"])
	}
	recs := e.sim.Requests()
	last := recs[len(recs)-1]
	if last.BodySize != int64(len(body)) || len(last.Body) != 64<<10 {
		t.Errorf("recorded body %d of %d bytes, want 65536 of %d", len(last.Body), last.BodySize, len(body))
	}
	if got := e.sim.RouteCounts()["POST /v1/faxes/send"]; got != 1 {
		t.Errorf("RouteCounts: got %d, want 1", got)
	}

	failures := []struct{ name, body, msg string }{
		{"to_number missing", `{"file_data":"JVBERg=="}`, "The to number field is required."},
		{"file_data missing", `{"to_number":"+14155550100"}`, "The file data field is required."},
		{"file_data not base64", `{"to_number":"+14155550100","file_data":"%%%"}`, "The file data must be a valid base64 string."},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) { wantFailure(t, e.api(t, "POST", "/v1/faxes/send", tc.body), 422, tc.msg) })
	}
}

func TestFaxDeleteWithBody(t *testing.T) {
	e := newEnv(t)
	r := e.api(t, "DELETE", "/v1/faxes/delete", `{"job_id":"job_42"}`)
	if want := `{"status":1,"message":"Fax deleted successfully.","data":{"job_id":"job_42"}}`; r.code != 200 || r.raw != want {
		t.Errorf("got %d %s, want 200 %s", r.code, r.raw, want)
	}
	wantFailure(t, e.api(t, "DELETE", "/v1/faxes/delete", ``), 422, "The job id field is required.")
	wantFailure(t, e.api(t, "DELETE", "/v1/faxes/delete", `job_42`), 400, "The request body is not valid JSON.")
}

func TestRateLimitHeaders(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	reset := e.clock.Now().Add(5 * time.Minute).Unix()
	for i := 1; i <= 3; i++ {
		r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), "")
		if got := r.header.Get("X-RateLimit-Limit"); got != "2500" {
			t.Errorf("X-RateLimit-Limit: got %q, want 2500", got)
		}
		if got, want := r.header.Get("X-RateLimit-Remaining"), strconv.Itoa(2500-i); got != want {
			t.Errorf("request %d X-RateLimit-Remaining: got %q, want %q", i, got, want)
		}
		if got, want := r.header.Get("X-RateLimit-Reset"), strconv.FormatInt(reset, 10); got != want {
			t.Errorf("X-RateLimit-Reset: got %q, want %q", got, want)
		}
	}
	other := e.token(t)
	if got := e.do(t, "GET", "/v1/esign_templates", authHdr(other), "").header.Get("X-RateLimit-Remaining"); got != "2499" {
		t.Errorf("another token's first request: got %q, want 2499 (budgets are per token)", got)
	}
	e.clock.Advance(5 * time.Minute)
	if got := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), "").header.Get("X-RateLimit-Remaining"); got != "2499" {
		t.Errorf("after the window: got %q, want 2499", got)
	}
}
