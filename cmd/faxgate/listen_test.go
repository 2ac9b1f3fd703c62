package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/faxgate/faxgate/internal/config"
)

// TestCheckRefusesListenersOnOneAddress: a file whose proxy and admin
// listeners share an address, in any spelling, passed check and then made
// serve fail with "address already in use". For each pair of spellings,
// serve is first run on the file as it stands, unvalidated, to show what the
// kernel does with it; check must then refuse exactly the files serve could
// not start with.
func TestCheckRefusesListenersOnOneAddress(t *testing.T) {
	for _, tc := range []struct {
		server, admin string
		conflict      bool
	}{
		{"127.0.0.1", "::ffff:127.0.0.1", true},
		{"127.0.0.1", "localhost", true},
		{"::ffff:0.0.0.0", "127.0.0.1", true},
		{"", "::1", true},
		{"127.0.0.1", "127.0.0.2", false},
		{"127.0.0.1", "::1", false},
	} {
		t.Run(tc.server+" "+tc.admin, func(t *testing.T) {
			for _, h := range []string{tc.server, tc.admin} {
				if ln, err := net.Listen("tcp", net.JoinHostPort(h, "0")); err != nil {
					t.Skipf("cannot listen on %q here: %v", h, err)
				} else {
					ln.Close()
				}
			}
			port := freePort(t)
			dir := t.TempDir()
			key := filepath.Join(dir, "api-key")
			if err := os.WriteFile(key, []byte(testKey+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "faxgate.yaml")
			cfgText := fmt.Sprintf("server: {listen: %q}\nadmin: {listen: %q}\n"+
				"upstream: {base_url: \"http://127.0.0.1:1\", api_key_file: %q}\n"+
				"callers:\n  list: [{name: local, cidrs: [\"127.0.0.0/8\"], allow: [\"*\"]}]\n",
				net.JoinHostPort(tc.server, port), net.JoinHostPort(tc.admin, port), key)
			if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
				t.Fatal(err)
			}

			// What serve does with the file when nothing checks its listeners.
			cfg := config.Default()
			if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var stderr syncBuffer
			err := serve(ctx, &cfg, "", env{stdout: &stderr, stderr: &stderr, getenv: mapEnv(nil),
				ready: func(string, string) { cancel() }})
			inUse := err != nil && strings.Contains(err.Error(), "address already in use")
			if err != nil && !inUse {
				t.Fatalf("serve: %v", err)
			}
			if inUse != tc.conflict {
				t.Fatalf("serve: address in use = %v, want %v; the case no longer shows what it claims", inUse, tc.conflict)
			}

			r := runCmd(t, nil, "check", "--config", path)
			switch {
			case tc.conflict && (r.code != 1 || !strings.HasPrefix(r.stdout, "admin.listen: ")):
				t.Errorf("check: exit %d\n%s\nwant 1 and a problem at admin.listen, as serve cannot start", r.code, r.stdout)
			case !tc.conflict && r.code != 0:
				t.Errorf("check: exit %d\n%s\nwant 0, as serve starts", r.code, r.stdout)
			}
		})
	}
}

// freePort is a TCP port that was free on every address a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
