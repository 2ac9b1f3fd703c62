package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProbe: faxgate probe exits 0 on a 2xx answer and 1 on anything else,
// with exactly one line on stderr naming the URL without its query, and the
// start of the body when there is one.
func TestProbe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ready":true}` + "\n")) })
	mux.HandleFunc("/notready", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("{\"ready\":false,\n\"reason\":\"no valid token\"}"))
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/readyz", http.StatusFound) })
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	// A peer that never answers: the handler returns when the probe gives up.
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	closed := freeAddr(t)

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // the whole stderr line, without its newline
	}{
		{"ready", []string{srv.URL + "/readyz?token=secret"}, 0, "faxgate probe: GET " + srv.URL + "/readyz: 200 OK: {\"ready\":true}"},
		{"no content", []string{srv.URL + "/empty"}, 0, "faxgate probe: GET " + srv.URL + "/empty: 204 No Content"},
		{"not ready", []string{srv.URL + "/notready"}, 1, "faxgate probe: GET " + srv.URL + "/notready: 503 Service Unavailable: {\"ready\":false, \"reason\":\"no valid token\"}"},
		{"a redirect is not followed", []string{srv.URL + "/moved"}, 1, "faxgate probe: GET " + srv.URL + "/moved: 302 Found: <a href=\"/readyz\">Found</a>."},
		{"not found", []string{srv.URL + "/nope"}, 1, "faxgate probe: GET " + srv.URL + "/nope: 404 Not Found: 404 page not found"},
		{"no answer in time", []string{"--timeout", "200ms", srv.URL + "/hang"}, 1, "faxgate probe: GET " + srv.URL + "/hang: no answer within 200ms"},
		{"nothing listening", []string{"http://" + closed + "/readyz"}, 1, "faxgate probe: GET http://" + closed + "/readyz: dial tcp " + closed + ": connect: connection refused"},
		{"not a URL", []string{"faxgate-metrics:9090/readyz"}, 1, `faxgate probe: "faxgate-metrics:9090/readyz" is not an http or https URL`},
		{"credentials are not shown", []string{"http://user:pw@" + closed + "/x"}, 1, "faxgate probe: GET http://" + closed + "/x: dial tcp " + closed + ": connect: connection refused"},
		{"no URL", nil, 1, "faxgate probe: exactly one URL is required (faxgate probe [--timeout 5s] URL)"},
		{"two URLs", []string{srv.URL, srv.URL}, 1, "faxgate probe: exactly one URL is required (faxgate probe [--timeout 5s] URL)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, nil, append([]string{"probe"}, tc.args...)...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d", r.code, tc.code)
			}
			if r.stderr != tc.want+"\n" {
				t.Errorf("stderr %q\n          want %q", r.stderr, tc.want+"\n")
			}
			if r.stdout != "" || strings.Contains(r.stderr, "secret") || strings.Contains(r.stderr, "pw@") {
				t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
			}
		})
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
