package listener

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"

	"github.com/faxgate/faxgate/internal/testing/race"
	"github.com/faxgate/faxgate/internal/testing/writecalls"
)

// callConn is a connection that records its write calls as the kernel
// would see them, and keeps the bytes.
type callConn struct {
	net.Conn
	writecalls.Recorder
	out   bytes.Buffer
	err   error // every write fails with it when set
	short bool  // a plain write takes one byte less, without an error
}

func (c *callConn) Write(p []byte) (int, error) {
	c.Add(p)
	if c.err != nil {
		return 0, c.err
	}
	if c.short && len(p) > 0 {
		return c.out.Write(p[:len(p)-1])
	}
	return c.out.Write(p)
}

func (c *callConn) WriteVec(bufs net.Buffers) (int64, error) {
	c.Add(bufs...)
	if c.err != nil {
		return 0, c.err
	}
	return bufs.WriteTo(&c.out)
}

// heldConn is a framing connection over a callConn, as Wrap's listener
// accepts it, and an HTTP/1 request on it.
func heldConn(proto int) (*framingConn, *callConn, *http.Request) {
	cc := &callConn{}
	fc := newFramingConn(cc, sniffBufSize)
	fc.holds = newHoldPool()
	r, _ := http.NewRequest("GET", "http://x/v1/esign_templates", nil)
	r.ProtoMajor = proto
	return fc, cc, r.WithContext(withConn(context.Background(), fc))
}

func write(t *testing.T, c net.Conn, n int, b byte) []byte {
	t.Helper()
	p := bytes.Repeat([]byte{b}, n)
	if k, err := c.Write(p); k != n || err != nil {
		t.Fatalf("Write of %d bytes: %d, %v", n, k, err)
	}
	return p
}

// TestHeldWritesGoOutTogether: while writes are held, a write of at most
// 4 KiB (net/http's flush of the head and the body's first bytes) goes out
// with the next one in one call, or alone at the release; a larger write
// with nothing held goes out at once. Without a hold every write is its
// own call.
func TestHeldWritesGoOutTogether(t *testing.T) {
	for _, tc := range []struct {
		name    string
		writes  []int
		calls   [][]int // after the release
		before  int     // calls made before the release
		holding bool    // a write is held before the release
	}{
		{"flush then the rest", []int{holdSize, 60 << 10}, [][]int{{holdSize, 60 << 10}}, 1, false},
		{"one small write", []int{100}, [][]int{{100}}, 0, true},
		{"one large write", []int{holdSize + 1}, [][]int{{holdSize + 1}}, 1, false},
		{"three writes", []int{10, 20, 30}, [][]int{{10, 20}, {30}}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, cc, r := heldConn(1)
			held := ConnOf(r).HoldWrites()
			var want []byte
			for i, n := range tc.writes {
				want = append(want, write(t, fc, n, byte('a'+i))...)
			}
			if cc.Len() != tc.before {
				t.Errorf("%d calls before the release, want %d: %v", cc.Len(), tc.before, cc.Calls())
			}
			if held.Holding() != tc.holding {
				t.Errorf("Holding %v, want %v", held.Holding(), tc.holding)
			}
			if err := held.Release(); err != nil {
				t.Fatal(err)
			}
			if held.Holding() {
				t.Error("Holding after the release")
			}
			if calls := cc.Calls(); !slices.EqualFunc(calls, tc.calls, slices.Equal) {
				t.Errorf("calls %v, want %v", calls, tc.calls)
			}
			if !bytes.Equal(cc.out.Bytes(), want) {
				t.Error("the bytes written differ from the writes, or their order")
			}
			// Released: the writes pass through as they come.
			cc.Reset()
			write(t, fc, 10, 'x')
			write(t, fc, 10, 'y')
			if cc.Len() != 2 {
				t.Errorf("after the release: %d calls for 2 writes", cc.Len())
			}
			if err := held.Release(); err != nil || cc.Len() != 2 {
				t.Errorf("a second release: %v, %d calls", err, cc.Len())
			}
		})
	}
}

// TestHoldWritesHoldsOnlyPlainHTTP1: over HTTP/2, on a connection that
// cannot gather its writes, without a pool (under TLS), outside the
// listener, or while writes are held already, HoldWrites holds nothing.
func TestHoldWritesHoldsOnlyPlainHTTP1(t *testing.T) {
	check := func(name string, c net.Conn, cc *callConn, r *http.Request) {
		t.Helper()
		held := ConnOf(r).HoldWrites()
		if held != (Held{}) {
			t.Errorf("%s: writes held", name)
		}
		if cc != nil {
			n := cc.Len()
			write(t, c, 10, 'a')
			if cc.Len() != n+1 {
				t.Errorf("%s: a write was kept", name)
			}
		}
		if err := held.Release(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	fc, cc, r := heldConn(2)
	check("HTTP/2", fc, cc, r)

	fc, cc, r = heldConn(1)
	fc.holds = nil
	check("no pool", fc, cc, r)

	plain := newFramingConn(&scriptConn{}, sniffBufSize)
	plain.holds = newHoldPool()
	r, _ = http.NewRequest("GET", "http://x/", nil)
	check("no gathering", plain, nil, r.WithContext(withConn(context.Background(), plain)))

	r, _ = http.NewRequest("GET", "http://x/", nil)
	check("no listener", nil, nil, r)

	fc, cc, r = heldConn(1)
	first := ConnOf(r).HoldWrites()
	if first == (Held{}) {
		t.Fatal("the first hold holds nothing")
	}
	if ConnOf(r).HoldWrites() != (Held{}) {
		t.Error("a second hold while the first lasts")
	}
	write(t, fc, 10, 'a')
	if cc.Len() != 0 {
		t.Error("the first hold ended with the second")
	}
	if err := first.Release(); err != nil || cc.Len() != 1 {
		t.Errorf("release: %v, %d calls", err, cc.Len())
	}
}

// TestHeldWriteFailureIsReported: a held write that fails is the error of
// the write it went out with, or of the release; either way nothing is
// left held.
func TestHeldWriteFailureIsReported(t *testing.T) {
	boom := errors.New("boom")

	fc, cc, r := heldConn(1)
	held := ConnOf(r).HoldWrites()
	write(t, fc, 100, 'a')
	cc.err = boom
	if n, err := fc.Write(make([]byte, 200)); n != 0 || !errors.Is(err, boom) {
		t.Errorf("the write after a held one: %d, %v; want 0, boom", n, err)
	}
	if err := held.Release(); err != nil || cc.Len() != 1 {
		t.Errorf("release after the failure: %v, %d calls; want nothing more written", err, cc.Len())
	}

	fc, cc, r = heldConn(1)
	held = ConnOf(r).HoldWrites()
	write(t, fc, 100, 'a')
	cc.err = boom
	if err := held.Release(); !errors.Is(err, boom) {
		t.Errorf("release of a held write that fails: %v", err)
	}
	if fc.held != nil {
		t.Error("the hold outlived its release")
	}

	// A short write without an error, which io.Writer forbids, is not
	// taken for a whole one.
	fc, cc, r = heldConn(1)
	held = ConnOf(r).HoldWrites()
	write(t, fc, 100, 'a')
	cc.short = true
	if err := held.Release(); !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("release of a held write written short: %v", err)
	}
}

// TestReleasedHoldStaysReleased: a Held released, or released again after
// a later hold on the same connection began, does not touch that hold.
func TestReleasedHoldStaysReleased(t *testing.T) {
	fc, cc, r := heldConn(1)
	first := ConnOf(r).HoldWrites()
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	second := ConnOf(r).HoldWrites()
	write(t, fc, 100, 'a')
	if first.Holding() {
		t.Error("a released hold reports the next one's held write")
	}
	if err := first.Release(); err != nil || cc.Len() != 0 || !second.Holding() {
		t.Errorf("a released hold, released again, ended the next one: %v, %d calls", err, cc.Len())
	}
	if err := second.Release(); err != nil || cc.Len() != 1 {
		t.Errorf("release: %v, %d calls", err, cc.Len())
	}
}

// TestHoldAllocatesNothing: a hold's memory comes back to the listener's
// pool at its release, so holding, writing and releasing allocate nothing.
// (A collection may empty the pool during the runs: up to a few new
// holds are allowed for, one a run is not.)
func TestHoldAllocatesNothing(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector allocates on its own and drops what sync.Pool is given")
	}
	var dc discardConn
	fc := newFramingConn(&dc, sniffBufSize)
	fc.holds = newHoldPool()
	r, _ := http.NewRequest("GET", "http://x/v1/esign_templates", nil)
	r = r.WithContext(withConn(context.Background(), fc))
	head, rest := make([]byte, holdSize), make([]byte, 60<<10)
	allocs := testing.AllocsPerRun(100, func() {
		held := ConnOf(r).HoldWrites()
		_, _ = fc.Write(head)
		_, _ = fc.Write(rest)
		_ = held.Release()
	})
	if allocs > 0.1 {
		t.Errorf("a hold, two writes and a release allocate %v times", allocs)
	}
	if dc.vecs != 101 { // AllocsPerRun runs it once more
		t.Errorf("%d vectored writes for 101 holds", dc.vecs)
	}
}

// discardConn counts its vectored writes and drops every byte, without
// allocating.
type discardConn struct {
	net.Conn
	vecs int
}

func (c *discardConn) Write(p []byte) (int, error) { return len(p), nil }

func (c *discardConn) WriteVec(bufs net.Buffers) (int64, error) {
	c.vecs++
	var n int64
	for _, p := range bufs {
		n += int64(len(p))
	}
	return n, nil
}
