package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const testKey = "sk_cmd_test_secret"

// stderrBuf collects run's output and signals every write, so a test can wait
// for the listening line without polling.
type stderrBuf struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func newStderrBuf() *stderrBuf { return &stderrBuf{wrote: make(chan struct{}, 16)} }

func (b *stderrBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (b *stderrBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func writeKey(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunServesAndStops(t *testing.T) {
	keyFile := writeKey(t, "  "+testKey+"\n") // whitespace around the key is trimmed
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := newStderrBuf()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--api-key-file", keyFile, "--token-ttl", "90s"}, stderr)
	}()

	var addr string
	deadline := time.After(5 * time.Second)
	for addr == "" {
		select {
		case <-stderr.wrote:
			if a, ok := strings.CutPrefix(strings.TrimSpace(stderr.String()), "faxsim listening on "); ok {
				addr = a
			}
		case code := <-done:
			t.Fatalf("run exited with %d before listening: %s", code, stderr.String())
		case <-deadline:
			t.Fatalf("no listening line after 5s: %q", stderr.String())
		}
	}
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("listening line shows %q, want the bound port", addr)
	}

	resp, err := http.Post("http://"+addr+"/v1/auth", "application/json", strings.NewReader(`{"api_secret_key":"`+testKey+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Status int
		Data   struct {
			ExpiresIn int `json:"expires_in"`
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || out.Status != 1 || out.Data.ExpiresIn != 90 {
		t.Errorf("auth: got %d %+v (%v), want 200 status 1 expires_in 90", resp.StatusCode, out, err)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code: got %d, want 0", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return within 5s of cancellation")
	}
	if got := stderr.String(); strings.Contains(got, testKey) || strings.Count(got, "\n") != 1 {
		t.Errorf("stderr: got %q, want only the listening line and never the key", got)
	}
}

func TestRunRefusesBadStarts(t *testing.T) {
	key := writeKey(t, testKey)
	empty := writeKey(t, " \n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--listen", "127.0.0.1:0", "--api-key-file", key, "--nope"}, "faxsim: flag provided but not defined: -nope"},
		{"listen missing", []string{"--api-key-file", key}, "faxsim: --listen is required"},
		{"key file missing", []string{"--listen", "127.0.0.1:0"}, "faxsim: --api-key-file is required"},
		{"key file unreadable", []string{"--listen", "127.0.0.1:0", "--api-key-file", key + ".absent"}, "faxsim: reading --api-key-file: open " + key + ".absent: no such file or directory"},
		{"key file empty", []string{"--listen", "127.0.0.1:0", "--api-key-file", empty}, "faxsim: --api-key-file " + empty + " is empty"},
		{"bad ttl", []string{"--listen", "127.0.0.1:0", "--api-key-file", key, "--token-ttl", "soon"}, `faxsim: invalid value "soon" for flag -token-ttl: parse error`},
		{"ttl too short", []string{"--listen", "127.0.0.1:0", "--api-key-file", key, "--token-ttl", "500ms"}, "faxsim: --token-ttl must be at least 1s, got 500ms"},
		{"bad endpoint limit", []string{"--listen", "127.0.0.1:0", "--api-key-file", key, "--endpoint-limit", "2500"}, `faxsim: --endpoint-limit "2500": want REQUESTS/DURATION, e.g. 2500/5m`},
		{"bad tenant limit", []string{"--listen", "127.0.0.1:0", "--api-key-file", key, "--tenant-limit", "10/0s"}, `faxsim: --tenant-limit "10/0s": the window must be a duration above 0, e.g. 10s`},
		{"stray argument", []string{"--listen", "127.0.0.1:0", "--api-key-file", key, "serve"}, `faxsim: unexpected argument "serve"`},
		{"bad address", []string{"--listen", "256.0.0.1:http-nope", "--api-key-file", key}, "faxsim: listen tcp: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stderr)
			got := stderr.String()
			if code != 1 {
				t.Errorf("exit code: got %d, want 1", code)
			}
			if !strings.HasPrefix(got, tc.want) || strings.Count(got, "\n") != 1 {
				t.Errorf("stderr: got %q, want one line starting %q", got, tc.want)
			}
			if strings.Contains(got, testKey) {
				t.Errorf("stderr leaks the key: %q", got)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &stderr); code != 0 {
		t.Errorf("exit code: got %d, want 0", code)
	}
	if !strings.Contains(stderr.String(), "--api-key-file") {
		t.Errorf("usage: got %q, want it to mention --api-key-file", stderr.String())
	}
}
