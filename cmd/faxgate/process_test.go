package main

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is faxgate running as its own process: this test binary running
// main (see TestMain), so with main's signal handling and main's 1 s log
// buffer, which a gateway run inside the test (startServe) does not have.
// A test can send it real signals, SIGKILL included, and read what reached
// its stderr: what an operator's log collector would have.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{} // closed when the process has exited and stderr is read to its end
	err    error         // cmd.Wait's error, once exited is closed
}

// startProc starts `faxgate args...` as a process and returns at once.
// The process is killed, if it still runs, when the test ends.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// A -race child would sleep 1s at exit (GORACE atexit_sleep_ms).
	cmd.Env = append(os.Environ(), "FAXGATE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0")
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	// Not an *os.File: exec copies the child's stderr in a goroutine, and
	// Wait returns once the copy has reached the end.
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// Stderr is what the process has written to stderr so far.
func (p *proc) Stderr() string { return p.stderr.String() }

// running fails the test if the process has exited.
func (p *proc) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("faxgate exited: %v\nstderr:\n%s", p.err, p.Stderr())
	default:
	}
}

// kill sends SIGKILL, as the OOM killer or a node's eviction does: no
// handler runs, nothing is flushed. It waits for the process to be gone and
// returns everything it wrote to stderr.
func (p *proc) kill(t *testing.T) string {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("faxgate still running 5s after SIGKILL")
	}
	return p.Stderr()
}

// fixListeners rewrites the listeners of a writeConfig file from port 0
// to free ports and returns them, so that a test can reach a process's
// listeners without waiting for its "faxgate serving" line, which main's
// log buffer may hold for a second.
func fixListeners(t *testing.T, path string) (proxyAddr, adminAddr string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	if strings.Count(cfg, `listen: "127.0.0.1:0"`) != 2 {
		t.Fatalf("%s does not have the two listeners of writeConfig:\n%s", path, cfg)
	}
	var addrs [2]string
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		// Both held open until both are chosen, so they differ.
		defer ln.Close()
		addrs[i] = "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		cfg = strings.Replace(cfg, `listen: "127.0.0.1:0"`, `listen: "`+addrs[i]+`"`, 1)
	}
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return addrs[0], addrs[1]
}
