package httpjson

import (
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, c := range []struct {
		name       string
		v          any
		wantStatus int
		wantBody   string
	}{
		{"value", map[string]any{"n": "+1 <555>"}, 201, "{\"n\":\"+1 <555>\"}\n"},
		{"not encodable", map[string]any{"f": func() {}}, 500, "{\"status\":0,\"message\":\"cannot encode the response\"}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Write(w, 201, c.v)
			if w.Code != c.wantStatus || w.Body.String() != c.wantBody || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("got %d %q %v, want %d %q", w.Code, w.Body.String(), w.Header(), c.wantStatus, c.wantBody)
			}
		})
	}
}
