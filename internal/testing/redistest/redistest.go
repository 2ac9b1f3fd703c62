// Package redistest runs real redis-server processes for tests: each on a free
// loopback port, without persistence, killed at the end of the test that
// started it. Tests can kill and restart a server to simulate an outage.
//
// Besides one node it starts the topologies production runs, to fail them
// over for real: a primary with replicas and three sentinels
// (StartSentinels), a cluster whose primaries each have a replica
// (StartClusterReplicas), and a TCP forwarder that repoints new connections
// as a DNS name or a Kubernetes Service does (Forward).
//
// It imports only the standard library and go-redis, so any package's tests
// (tokencache's included) can use it without an import cycle.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/faxgate/faxgate/internal/testing/eventually"
	"github.com/faxgate/faxgate/internal/testing/syncbuf"
)

// Bounds on every wait, so a broken redis-server fails a test instead of hanging it.
const (
	readyTimeout = 5 * time.Second
	stopTimeout  = 5 * time.Second
	bindAttempts = 5
)

// Server is a redis-server process started by a test on a free loopback port.
type Server struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// Port is the TCP port of Addr.
	Port int

	bin  string
	conf string   // config file; redis-server may rewrite it (sentinel, cluster)
	args []string // extra command-line arguments after the config file
	out  *syncbuf.Buffer
	tls  *tls.Config // set for a server started by StartTLS
	// password is the server's requirepass (Client authenticates with it);
	// "" for none.
	password string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// Start starts redis-server on 127.0.0.1 on a free port with no persistence,
// waits until it answers PING, and stops it when the test ends. args are
// extra redis-server options ("--maxmemory", "1mb").
//
// When redis-server is not installed the test is skipped, or fails when the
// environment variable CI is "true": CI must never pass by skipping.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	return start(t, bin, "redis", func(port int, dir string) string {
		return baseConf(port, dir)
	}, args, nil)
}

// Kill sends SIGKILL and waits for the process to exit, as a crash would.
// The data is gone: the server runs without persistence.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		// Process.Wait cannot outlive SIGKILL for long; this only guards the test.
	}
}

// running reports whether the process is up (started and not killed).
func (s *Server) running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the running server: syscall.SIGSTOP makes it a server
// that accepts connections (the kernel does) but never answers, the outage a
// client must not hang on; syscall.SIGCONT resumes it.
func (s *Server) Signal(sig os.Signal) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("redis-server is not running")
	}
	return cmd.Process.Signal(sig)
}

// Restart starts the server again on the same port (after Kill) and waits for
// PING. Binding is retried briefly in case the port is not free yet.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	var fatal error
	err := eventually.Wait(readyTimeout, func() error {
		err := s.launch()
		if err != nil && !errors.Is(err, errBind) {
			fatal = err // not a port still in use: trying again cannot help
			return nil
		}
		return err
	})
	if err == nil {
		err = fatal
	}
	if err != nil {
		t.Fatalf("redistest: restarting redis-server on %s: %v\n%s", s.Addr, err, s.out.String())
	}
}

// Client returns a go-redis client of s, closed when the test ends. It
// honours context deadlines and gives up quickly, as the gateway's does.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr,
		Password:              s.password,
		TLSConfig:             s.tls,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		MaxRetries:            1,
		PoolSize:              4,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Output returns what redis-server has written to stdout and stderr so far.
func (s *Server) Output() string { return s.out.String() }

func lookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	msg := fmt.Sprintf("redistest: %s not found: install it (apt-get install redis-server redis-tools); CI fails instead of skipping", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func baseConf(port int, dir string) string {
	return fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\nsave \"\"\nappendonly no\ndir %q\nloglevel warning\n", port, dir)
}

// start writes the config made by conf for a free port and starts bin with
// it, retrying with another port when a concurrent process took the port
// between the probe and redis-server's bind. With tlsCfg the server speaks
// TLS only, and readiness is probed over TLS.
func start(t testing.TB, bin, name string, conf func(port int, dir string) string, args []string, tlsCfg *tls.Config) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{bin: bin, args: args, out: &syncbuf.Buffer{}, conf: filepath.Join(dir, name+".conf"), tls: tlsCfg}
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("redistest: output of %s on %s:\n%s", name, s.Addr, s.out.String())
		}
	})
	var err error
	for range bindAttempts {
		var port int
		port, err = FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Port, s.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = os.WriteFile(s.conf, []byte(conf(port, dir)), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if err = s.launch(); err == nil {
			return s
		}
		if !errors.Is(err, errBind) {
			break
		}
	}
	t.Fatalf("redistest: starting %s: %v\n%s", name, err, s.out.String())
	return nil
}

var errBind = errors.New("address already in use")

// launch starts the process and waits until it answers PING.
func (s *Server) launch() error {
	mark := s.out.Len()
	cmd := exec.Command(s.bin, append([]string{s.conf}, s.args...)...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = sysProcAttr()
	// The output is copied by goroutines that end when every holder of the
	// pipe is gone; WaitDelay bounds Wait should a child keep it open.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reaps the process: no zombies
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	var exited error
	err := eventually.Wait(readyTimeout, func() error {
		select {
		case <-done:
			exited = fmt.Errorf("redis-server exited at start: %s", cmd.ProcessState)
			if strings.Contains(s.out.String()[mark:], "Address already in use") {
				exited = errBind
			}
			return nil
		default:
		}
		if s.tls == nil && ping(s.Addr) || s.tls != nil && pingTLS(s.Addr, s.tls) {
			return nil
		}
		return fmt.Errorf("redis-server on %s did not answer PING within %s", s.Addr, readyTimeout)
	})
	if exited != nil {
		return exited
	}
	if err != nil {
		s.Kill()
	}
	return err
}

// ping speaks just enough RESP to know the server is serving; it avoids
// go-redis so that readiness does not depend on the code under test's client.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	return pingOn(c)
}

// pingOn sends PING on c, closes it, and reports whether the server serves.
func pingOn(c net.Conn) bool {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	// A server still loading answers -LOADING; one with requirepass answers
	// -NOAUTH, which is as ready as +PONG.
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH"))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
