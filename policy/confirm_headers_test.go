package policy

import (
	"net/http"
	"testing"

	"github.com/faxgate/faxgate/policy/route"
)

func TestCheckConfirmHeaders(t *testing.T) {
	for _, c := range []struct {
		name string
		h    http.Header
		ok   bool
	}{
		{"json", http.Header{"Content-Type": {"application/json"}}, true},
		{"json with charset", http.Header{"Content-Type": {"application/json; charset=utf-8"}}, true},
		{"Connection close", http.Header{"Content-Type": {"application/json"}, "Connection": {"close"}}, true},
		{"none", http.Header{}, false},
		{"two", http.Header{"Content-Type": {"application/json", "application/json"}}, false},
		{"underscore second", http.Header{"Content-Type": {"application/json"}, "Content_type": {"text/plain"}}, false},
		{"form", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, false},
		{"list", http.Header{"Content-Type": {"application/json, text/plain"}}, false},
		{"encoding", http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, false},
		{"encoding empty", http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {""}}, false},
		{"encoding underscore", http.Header{"Content-Type": {"application/json"}, "Content_encoding": {"br"}}, false},
		{"Connection names type", http.Header{"Content-Type": {"application/json"}, "Connection": {"close, content-type"}}, false},
		{"Connection names encoding", http.Header{"Content-Type": {"application/json"}, "Connection": {"keep-alive", " Content_Encoding "}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckConfirmHeaders(c.h)
			if (err == nil) != c.ok {
				t.Fatalf("CheckConfirmHeaders(%v) = %v, want ok=%v", c.h, err, c.ok)
			}
			if err != nil && (err.Status != 400 || err.Code != route.CodeInvalidRequest) {
				t.Fatalf("refusal %d %s, want 400 invalid_request", err.Status, err.Code)
			}
		})
	}
}
