package vecio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"testing"

	"github.com/faxgate/faxgate/internal/testing/race"
	"github.com/faxgate/faxgate/internal/testing/writecalls"
)

// TestGatheredWriteOnTCPArrivesWhole: on a TCP connection the gathered
// buffers (one writev(2)) arrive whole and in order, and writing them
// allocates nothing.
func TestGatheredWriteOnTCPArrivesWhole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vec := [][]byte{bytes.Repeat([]byte("a"), 100<<10), {'b'}, bytes.Repeat([]byte("c"), 70<<10)}
	want := bytes.Join(vec, nil)
	var nb net.Buffers
	if n, err := Write(c, slices.Clone(vec), &nb); err != nil || n != int64(len(want)) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	small := [][]byte{{'d'}, {'e'}}
	if !race.Enabled {
		scratch := make([][]byte, len(small))
		if allocs := testing.AllocsPerRun(20, func() {
			copy(scratch, small)
			if _, err := Write(c, scratch, &nb); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("a gathered write on TCP allocates %v times", allocs)
		}
		want = append(want, bytes.Repeat([]byte("de"), 21)...) // AllocsPerRun runs it once more
	}
	c.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Errorf("the other end got %d bytes, not the %d written in order", len(b), len(want))
	}
}

// vecRecorder records each call it gets, and keeps the bytes.
type vecRecorder struct {
	bytes.Buffer
	writecalls.Recorder
}

func (r *vecRecorder) Write(p []byte) (int, error) {
	r.Add(p)
	return r.Buffer.Write(p)
}

func (r *vecRecorder) WriteVec(bufs net.Buffers) (int64, error) {
	r.Add(bufs...)
	return bufs.WriteTo(&r.Buffer)
}

// TestWriteGathersOnlyWhereItCan: a Writer gets the buffers in one call;
// any other writer gets one Write per buffer, in order.
func TestWriteGathersOnlyWhereItCan(t *testing.T) {
	vec := [][]byte{[]byte("head"), []byte("body"), []byte("!")}
	var nb net.Buffers
	r := &vecRecorder{}
	if !Gathers(r) {
		t.Error("Gathers: false for a Writer")
	}
	if n, err := Write(r, slices.Clone(vec), &nb); n != 9 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if calls := r.Calls(); len(calls) != 1 || !slices.Equal(calls[0], []int{4, 4, 1}) || r.String() != "headbody!" {
		t.Errorf("a Writer got calls %v and %q, want one call of 4, 4, 1 bytes", calls, r.String())
	}
	var plain bytes.Buffer
	if Gathers(&plain) {
		t.Error("Gathers: true for a bytes.Buffer")
	}
	if n, err := Write(&plain, slices.Clone(vec), &nb); n != 9 || err != nil || plain.String() != "headbody!" {
		t.Errorf("Write to a plain writer: %d, %v, %q", n, err, plain.String())
	}
	if n, err := Write(r, nil, &nb); n != 0 || err != nil {
		t.Errorf("Write of nothing: %d, %v", n, err)
	}
}

// badWriter answers every Write with n and err, whatever it was given.
type badWriter struct {
	n   int
	err error
}

func (w badWriter) Write(p []byte) (int, error) { return w.n, w.err }

// TestWriteReportsWhatIoWriterForbids: a short write without an error ends
// the write with io.ErrShortWrite, a count outside the buffer with
// ErrInvalidWrite, and an error stops it at once; the count is what was
// written before.
func TestWriteReportsWhatIoWriterForbids(t *testing.T) {
	boom := errors.New("boom")
	vec := [][]byte{[]byte("abc"), []byte("def")}
	for _, tc := range []struct {
		name string
		w    badWriter
		n    int64
		err  error
	}{
		{"short", badWriter{n: 2}, 2, io.ErrShortWrite},
		{"too many", badWriter{n: 4}, 0, ErrInvalidWrite},
		{"negative", badWriter{n: -1}, 0, ErrInvalidWrite},
		{"failed", badWriter{n: 1, err: boom}, 1, boom},
	} {
		n, err := Write(tc.w, slices.Clone(vec), new(net.Buffers))
		if n != tc.n || !errors.Is(err, tc.err) {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, n, err, tc.n, tc.err)
		}
	}
}
