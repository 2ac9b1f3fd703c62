package tokencache_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/testing/clocktest"
	"github.com/faxgate/faxgate/tokencache"
)

func TestClientFetch(t *testing.T) {
	const key = "sk_live_0123456789"
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		wantErr  string // substring; "" = success
		wantLife time.Duration
	}{
		{"ok", 200, `{"status":1,"message":"ok","data":{"access_token":"abc.DEF-123","token_type":"Bearer","expires_in":86400}}`, "", 24 * time.Hour},
		{"short ttl", 200, `{"status":1,"data":{"access_token":"abc","token_type":"Bearer","expires_in":90}}`, "", 90 * time.Second},
		{"missing expires_in uses confirmed 24h", 200, `{"status":1,"data":{"access_token":"abc","token_type":"Bearer"}}`, "", 24 * time.Hour},
		{"invalid key", 401, `{"status":0,"message":"API Secret Key is invalid."}`, "rejected the API secret key", 0},
		{"server error", 503, `oops`, "HTTP 503", 0},
		{"status 0 on 200", 200, `{"status":0,"message":"no"}`, "status 0", 0},
		{"not json", 200, `<html>`, "not valid JSON", 0},
		{"no token", 200, `{"status":1,"data":{}}`, "no data.access_token", 0},
		{"token with space", 200, `{"status":1,"data":{"access_token":"a b"}}`, "not a valid header value", 0},
		{"token with newline", 200, `{"status":1,"data":{"access_token":"a\nX-Evil: 1"}}`, "not a valid header value", 0},
		{"wrong type", 200, `{"status":1,"data":{"access_token":"abc","token_type":"MAC"}}`, "token type", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gotPath string
			var gotBody map[string]string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotPath = r.URL.Path
				_ = json.NewDecoder(r.Body).Decode(&gotBody)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			clock := clocktest.New(t0)
			c := tokencache.NewClient(srv.URL+"/api/customer/", srv.Client().Transport, 5*time.Second,
				tokencache.StaticKey(tokencache.NewSecret(key)), clock)
			tok, err := c.Fetch(context.Background())
			if gotPath != "/api/customer/v1/auth" {
				t.Errorf("path = %q, want the base URL's prefix joined with /v1/auth", gotPath)
			}
			if gotBody["api_secret_key"] != key {
				t.Errorf("body api_secret_key not sent")
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), key) {
					t.Fatalf("error leaks the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if tok.Lifetime() != tc.wantLife || !tok.Issued.Equal(t0) {
				t.Fatalf("lifetime %v issued %v, want %v from %v", tok.Lifetime(), tok.Issued, tc.wantLife, t0)
			}
			if tok.Header() != "Bearer "+tok.Value.Reveal() {
				t.Fatalf("Header() = %q", tok.Header())
			}
		})
	}
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	var leaked atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Add(1)
	}))
	defer evil.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evil.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	c := tokencache.NewClient(srv.URL, http.DefaultTransport, 5*time.Second,
		tokencache.StaticKey(tokencache.NewSecret("k")), clock.Real{})
	if _, err := c.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP 307") {
		t.Fatalf("err = %v, want HTTP 307 refusal", err)
	}
	if leaked.Load() != 0 {
		t.Fatal("the token request followed a redirect: the key went to another URL")
	}
}

func TestFileKeyIsReReadOnEveryCall(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := tokencache.FileKey(p)
	if s, err := k(); err != nil || s.Reveal() != "first" {
		t.Fatalf("key = %v, %v", s.Reveal(), err)
	}
	if err := os.WriteFile(p, []byte("  second "), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := k(); err != nil || s.Reveal() != "second" {
		t.Fatalf("rotated key = %q, %v", s.Reveal(), err)
	}
	if err := os.WriteFile(p, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k(); err == nil {
		t.Fatal("empty key file accepted")
	}
	if _, err := tokencache.FileKey(filepath.Join(t.TempDir(), "missing"))(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
}
