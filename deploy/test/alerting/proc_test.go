//go:build alerting

package alerting

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"

	"github.com/faxgate/faxgate/internal/testing/pinnedtool"

	"github.com/faxgate/faxgate/internal/testing/syncbuf"
)

// repoRoot is the faxgate checkout this package sits in.
const repoRoot = "../../.."

// stopTimeout bounds a graceful stop before the process is killed.
const stopTimeout = 15 * time.Second

// tool finds a pinned tool (pinnedtool.Find: skips loudly on a laptop,
// fails in CI).
func tool(t *testing.T, name string) string { return pinnedtool.Find(t, name) }

// proc is a child process of the test: started, stopped, killed and started
// again by it, its output kept for the failure message.
type proc struct {
	name string
	bin  string
	args []string
	out  *syncbuf.Buffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// startProc starts bin and stops it when the test ends; a failed test
// prints the tail of its output.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, bin: bin, args: args, out: &syncbuf.Buffer{}}
	if err := p.start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- output of %s (last 4 KiB) ---\n%s", p.name, tail(p.out.String(), 4096))
		}
	})
	return p
}

func (p *proc) start() error {
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits, then kills what is still running.
func (p *proc) stop() {
	p.signalAndWait(syscall.SIGTERM, stopTimeout)
	p.kill()
}

// kill sends SIGKILL and waits for the process to be reaped.
func (p *proc) kill() { p.signalAndWait(syscall.SIGKILL, stopTimeout) }

func (p *proc) signalAndWait(sig syscall.Signal, limit time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(limit):
	}
}

// restart starts the process again with the same arguments.
func (p *proc) restart(t *testing.T) {
	t.Helper()
	if p.running() {
		t.Fatalf("%s: restart while running", p.name)
	}
	if err := p.start(); err != nil {
		t.Fatalf("%s: restart: %v", p.name, err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitHTTP waits until GET url answers 200, failing the test after limit or
// as soon as p exits.
func waitHTTP(t *testing.T, p *proc, url string, limit time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	eventually.EventuallyErr(t, limit, p.name+": "+url+" answering 200", func() error {
		if !p.running() {
			t.Fatalf("%s exited before %s answered 200\n%s", p.name, url, tail(p.out.String(), 4096))
		}
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d\n%s", resp.StatusCode, tail(p.out.String(), 4096))
		}
		return nil
	})
}

// buildBinaries builds faxgate and faxsim from the checkout into dir.
func buildBinaries(dir string) error {
	for _, name := range []string{"faxgate", "faxsim"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	}
	return nil
}

var errNotFound = errors.New("not found")

// joinLines is for messages listing several findings.
func joinLines(lines []string) string { return "\n\t" + strings.Join(lines, "\n\t") }
