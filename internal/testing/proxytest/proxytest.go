// Package proxytest runs a real forward proxy for tests: Debian's tinyproxy
// on a free loopback port, in the foreground, with a config the test writes
// (Basic authentication when asked, CONNECT to any port), killed at the end
// of the test. It stands for a company's egress proxy
// (docs/deployment.md#through-an-egress-proxy).
package proxytest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"
)

// Options shape a proxy.
type Options struct {
	// User and Password, when User is set, are the only credentials the
	// proxy accepts (Basic); without them it asks for none.
	User, Password string
}

// Proxy is a running tinyproxy.
type Proxy struct {
	// URL is "http://127.0.0.1:port", what upstream.proxy_url takes.
	URL  string
	Addr string

	out  *syncbuf.Buffer
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts tinyproxy, waits until it accepts connections, and kills it
// when the test ends. Without tinyproxy the test is skipped with a loud
// message, or fails when CI is "true": CI must never pass by skipping.
func Start(t testing.TB, o Options) *Proxy {
	t.Helper()
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		msg := "proxytest: tinyproxy not found: install it (apt-get install tinyproxy); CI fails instead of skipping"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	conf := fmt.Sprintf("Port %d\nListen 127.0.0.1\nTimeout 60\nMaxClients 200\nLogLevel Info\nAllow 127.0.0.1\n"+
		"DisableViaHeader Yes\n", port)
	if o.User != "" {
		conf += fmt.Sprintf("BasicAuth %s %s\n", o.User, o.Password)
	}
	path := filepath.Join(dir, "tinyproxy.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: "127.0.0.1:" + strconv.Itoa(port), out: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.URL = (&url.URL{Scheme: "http", Host: p.Addr}).String()
	p.cmd = exec.Command(bin, "-d", "-c", path)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.Kill)
	eventually.EventuallyErr(t, 5*time.Second, "tinyproxy accepting on "+p.Addr, func() error {
		select {
		case <-p.done:
			return fmt.Errorf("tinyproxy exited:\n%s", p.out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return p
}

// Kill stops the proxy at once, as a crashed or removed proxy would go;
// its port then refuses connections.
func (p *Proxy) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Log is what tinyproxy has logged so far (its requests and refusals).
func (p *Proxy) Log() string { return p.out.String() }
