package proxy_test

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/proxy"
)

func TestNewTransportTuning(t *testing.T) {
	tr, err := proxy.NewTransport(proxy.TransportOptions{MaxIdleConns: 77})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Proxy != nil {
		t.Errorf("Proxy is set: the environment must not reroute upstream traffic")
	}
	if !tr.DisableCompression {
		t.Errorf("DisableCompression = false: bodies must be relayed unchanged")
	}
	if tr.MaxIdleConns != 77 || tr.MaxIdleConnsPerHost != 77 {
		t.Errorf("idle conns = %d / %d per host, want 77 / 77", tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	}
	if tr.TLSClientConfig == nil || tr.TLSClientConfig.MinVersion < 0x0303 {
		t.Errorf("TLS minimum below 1.2: %+v", tr.TLSClientConfig)
	}
}

// TestNewTransportCAFile: upstream.ca_file makes a private CA's upstream
// trusted, and a bad file is a start failure naming the setting.
func TestNewTransportCAFile(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer up.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	without, err := proxy.NewTransport(proxy.TransportOptions{MaxIdleConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&http.Client{Transport: without}).Get(up.URL); err == nil {
		t.Errorf("an untrusted upstream certificate was accepted")
	}
	with, err := proxy.NewTransport(proxy.TransportOptions{MaxIdleConns: 4, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	defer with.CloseIdleConnections()
	resp, err := (&http.Client{Transport: with}).Get(up.URL)
	if err != nil {
		t.Fatalf("with upstream.ca_file: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Errorf("status %d, want 204", resp.StatusCode)
	}

	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"missing", filepath.Join(dir, "missing.pem"), "upstream.ca_file: open"},
		{"not PEM", notPEM, "upstream.ca_file: no PEM certificate in " + notPEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := proxy.NewTransport(proxy.TransportOptions{CAFile: tc.file})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
