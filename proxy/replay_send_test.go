package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/faxgate/faxgate/internal/base/vecio"
	"github.com/faxgate/faxgate/internal/testing/race"
	"github.com/faxgate/faxgate/internal/testing/writecalls"
)

// chunkWrites records what is written to it, and whether each write's bytes
// lay in the arena's region.
type chunkWrites struct {
	bytes.Buffer
	region     []byte
	fromRegion int
	writes     int
}

func (w *chunkWrites) Write(p []byte) (int, error) {
	w.writes++
	start := uintptr(unsafe.Pointer(unsafe.SliceData(w.region)))
	if a := uintptr(unsafe.Pointer(&p[0])); a >= start && a < start+uintptr(len(w.region)) {
		w.fromRegion++
	}
	return w.Buffer.Write(p)
}

// TestBodySendsItselfFromTheCopy: an upload the transport hands to the
// upstream connection's ReadFrom is written from the copy's chunks, with
// no buffer between, after the part the transport had read the ordinary
// way; what arrives is the body, and the copy is whole for a resend.
func TestBodySendsItselfFromTheCopy(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 5*replayChunk/2/16) // two and a half chunks: three
	pool := newReplayPool(1 << 20)
	rb := newReplayBody(io.NopCloser(bytes.NewReader(body)), pool, retryBufferMax)
	guard := &guardedBody{rc: rb}
	head := make([]byte, 3700) // what net/http's 4 KiB write buffer takes first
	if _, err := io.ReadFull(guard, head); err != nil {
		t.Fatal(err)
	}
	w := &chunkWrites{}
	rest := &io.LimitedReader{R: guard, N: int64(len(body) - len(head))}
	c := &upstreamConn{Conn: writerConn{w: w}, send: sender{bufs: newSendBufPool()}}
	pool.chunks.mu.Lock() // the region was mapped for the head's chunk
	w.region = pool.chunks.mem
	pool.chunks.mu.Unlock()
	n, err := c.ReadFrom(rest)
	if err != nil || n != int64(len(body)-len(head)) || rest.N != 0 {
		t.Fatalf("ReadFrom: %d, %v (left %d)", n, err, rest.N)
	}
	if got := append(head, w.Bytes()...); !bytes.Equal(got, body) {
		t.Fatal("the upstream got other bytes than the body")
	}
	if w.writes == 0 || w.fromRegion != w.writes {
		t.Errorf("%d of %d writes came from the copy's chunks", w.fromRegion, w.writes)
	}
	if _, err := io.Copy(io.Discard, guard); err != nil { // the transport reads on to EOF
		t.Fatal(err)
	}
	again, err := rb.getBody()
	if err != nil {
		t.Fatal(err)
	}
	if resent, _ := io.ReadAll(again); !bytes.Equal(resent, body) {
		t.Error("the copy for a resend is not the body")
	}
}

// TestBodySendsOnPastTheCap: a body whose copy passes the cap midway
// still reaches the upstream whole, and its chunks go back at once.
func TestBodySendsOnPastTheCap(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 3*replayChunk+100)
	pool := newReplayPool(2 * replayChunk)
	rb := newReplayBody(io.NopCloser(bytes.NewReader(body)), pool, retryBufferMax)
	guard := &guardedBody{rc: rb}
	var w bytes.Buffer
	n, err := (&upstreamConn{Conn: writerConn{w: &w}, send: sender{bufs: newSendBufPool()}}).ReadFrom(&io.LimitedReader{R: guard, N: int64(len(body))})
	if err != nil || n != int64(len(body)) || !bytes.Equal(w.Bytes(), body) {
		t.Fatalf("sent %d (%v), upstream got %d bytes", n, err, w.Len())
	}
	if held := pool.held.Load(); held != 0 {
		t.Errorf("%d bytes held by a copy given up", held)
	}
	if _, err := rb.getBody(); !errors.Is(err, errNotReplayable) {
		t.Errorf("a copy given up is replayable: %v", err)
	}
}

// TestBodySendStopsAtTheExchangeEnd: once the exchange is over (the guard
// closed, the handler done), nothing more of the caller's body is read,
// and the chunks are back.
func TestBodySendStopsAtTheExchangeEnd(t *testing.T) {
	pool := newReplayPool(1 << 20)
	rb := newReplayBody(io.NopCloser(bytes.NewReader(make([]byte, 100<<10))), pool, retryBufferMax)
	guard := &guardedBody{rc: rb}
	var w bytes.Buffer
	if _, err := guard.sendTo(&w, 10, &sender{bufs: newSendBufPool()}); err != nil {
		t.Fatal(err)
	}
	guard.Close()
	rb.attemptDone()
	rb.done()
	if n, err := guard.sendTo(&w, 1000, &sender{bufs: newSendBufPool()}); n != 0 || !errors.Is(err, errBodyClosed) {
		t.Fatalf("after the end: sent %d, %v", n, err)
	}
	if held := pool.held.Load(); held != 0 {
		t.Errorf("%d bytes held after the exchange", held)
	}
}

// TestBodySendAllocatesNoBuffer: a body sent upstream without a copy goes
// through the connection's pooled buffer. io.Copy's own 32 KiB per upload
// was garbage enough to start a collection every few dozen uploads
// (docs/performance.md).
func TestBodySendAllocatesNoBuffer(t *testing.T) {
	body := make([]byte, 200<<10)
	bufs := newSendBufPool()
	var made int
	bufs.p.New = func() any { made++; return new([sendBufSize]byte) }
	c := &upstreamConn{Conn: writerConn{w: io.Discard}, send: sender{bufs: bufs}}
	send := func() {
		guard := &guardedBody{rc: io.NopCloser(bytes.NewReader(body))}
		if n, err := c.ReadFrom(&io.LimitedReader{R: guard, N: int64(len(body))}); err != nil || n != int64(len(body)) {
			t.Fatalf("ReadFrom: %d, %v", n, err)
		}
	}
	for range 4 {
		send() // the pool's first buffer, and whatever warms up
	}
	// One P, as testing.AllocsPerRun has it: other tests' goroutines do
	// not allocate while the sends run.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const runs = 64
	var before, after runtime.MemStats
	made = 0
	runtime.ReadMemStats(&before)
	for range runs {
		send()
	}
	runtime.ReadMemStats(&after)
	// The pool's own buffers are not counted: under the race detector
	// sync.Pool drops a quarter of what it is given, and refills. Without
	// it, every buffer taken comes back, so none is made.
	if per := (after.TotalAlloc - before.TotalAlloc - uint64(made*sendBufSize)) / runs; per >= 1<<10 {
		t.Errorf("%d bytes allocated per send of a body without a copy, besides the pool's buffers; want under 1 KiB", per)
	}
	// A collection empties sync.Pool (two of them drop what it held): at
	// most the sendGather buffers one send uses at once are made again for
	// that. A send that keeps a buffer makes one more on every send.
	if !race.Enabled && made > sendGather {
		t.Errorf("%d buffers made over %d sends after the first: the sends do not give every buffer back", made, runs)
	}
	if out := bufs.extra.Load(); out != 0 {
		t.Errorf("%d gathering buffers still borrowed", out)
	}
}

// sizeRecorder records the sizes of the reads through it, or the write
// calls (vecio.Writer, as writev(2) takes them on a TCP connection).
type sizeRecorder struct {
	writecalls.Recorder
	r     io.Reader
	w     io.Writer
	sizes []int
}

func (s *sizeRecorder) Read(p []byte) (int, error) {
	s.sizes = append(s.sizes, len(p))
	return s.r.Read(p)
}

func (s *sizeRecorder) Write(p []byte) (int, error) {
	s.Add(p)
	return s.w.Write(p)
}

func (s *sizeRecorder) WriteVec(bufs net.Buffers) (int64, error) {
	s.Add(bufs...)
	return bufs.WriteTo(s.w)
}

// sendBody sends body upstream as the transport does, through a
// connection whose writes dst records, from src (its reads seen by the
// returned recorder), with a copy under copyCap, and returns what the
// upstream got.
func sendBody(t *testing.T, src io.Reader, n int, copyCap int64, dst *sizeRecorder) ([]byte, *sizeRecorder) {
	t.Helper()
	reads := &sizeRecorder{r: src}
	rb := newReplayBody(io.NopCloser(reads), newReplayPool(copyCap), retryBufferMax)
	defer rb.done()
	defer rb.Close()
	var got bytes.Buffer
	dst.w = &got
	c := &upstreamConn{Conn: writerConn{w: dst}, send: sender{bufs: newSendBufPool()}}
	if m, err := c.ReadFrom(&io.LimitedReader{R: &guardedBody{rc: rb}, N: int64(n)}); err != nil || m != int64(n) {
		t.Fatalf("copy cap %d: ReadFrom %d, %v", copyCap, m, err)
	}
	return got.Bytes(), reads
}

// TestBodySendGathersFullReads: with a copy or without, a body is read
// from the caller in reads of sendBufSize, and while they come back full,
// sendGather of them go upstream in one write (docs/performance.md).
func TestBodySendGathersFullReads(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), (2*sendWriteMax+sendBufSize+112)/16)
	for _, copyCap := range []int64{1 << 20, 0} {
		dst := &sizeRecorder{}
		got, reads := sendBody(t, bytes.NewReader(body), len(body), copyCap, dst)
		if !bytes.Equal(got, body) {
			t.Fatalf("copy cap %d: the upstream got other bytes than the body", copyCap)
		}
		for i, n := range reads.sizes[:2*sendGather+1] {
			if n != sendBufSize {
				t.Errorf("copy cap %d: read %d asked for %d bytes, want %d", copyCap, i, n, sendBufSize)
			}
		}
		full := []int{sendBufSize, sendBufSize, sendBufSize, sendBufSize}
		want := [][]int{full, full, {sendBufSize, 112}}
		if !reflect.DeepEqual(dst.Calls(), want) {
			t.Errorf("copy cap %d: writes of %v, want %v", copyCap, dst.Calls(), want)
		}
	}
}

// beforeRead calls f before each Read of r.
type beforeRead struct {
	r io.Reader
	f func()
}

func (o beforeRead) Read(p []byte) (int, error) {
	o.f()
	return o.r.Read(p)
}

// TestBodySendWritesWhatIsThereAtOnce: a read that comes back short, the
// caller's next bytes not there yet, ends the gathering: what was read is
// upstream before the caller's next bytes are asked for. A read that comes
// back full is gathered: a caller that pauses right after one leaves it
// unsent until its next bytes (docs/performance.md).
func TestBodySendWritesWhatIsThereAtOnce(t *testing.T) {
	parts := [][]byte{
		bytes.Repeat([]byte("a"), sendBufSize),
		bytes.Repeat([]byte("b"), 10<<10), // the caller pauses after this
		bytes.Repeat([]byte("c"), sendBufSize),
		bytes.Repeat([]byte("d"), 3),
	}
	body := bytes.Join(parts, nil)
	for _, copyCap := range []int64{1 << 20, 0} {
		var got bytes.Buffer
		dst := &sizeRecorder{w: &got}
		var upstreamAt []int // what the upstream had when each read began
		src := beforeRead{r: &scriptedReader{parts: slices.Clone(parts)}, f: func() { upstreamAt = append(upstreamAt, got.Len()) }}
		rb := newReplayBody(io.NopCloser(src), newReplayPool(copyCap), retryBufferMax)
		c := &upstreamConn{Conn: writerConn{w: dst}, send: sender{bufs: newSendBufPool()}}
		if m, err := c.ReadFrom(&io.LimitedReader{R: &guardedBody{rc: rb}, N: int64(len(body))}); err != nil || m != int64(len(body)) {
			t.Fatalf("copy cap %d: ReadFrom %d, %v", copyCap, m, err)
		}
		rb.Close()
		rb.done()
		if !bytes.Equal(got.Bytes(), body) {
			t.Fatalf("copy cap %d: the upstream got other bytes than the body", copyCap)
		}
		// The a's are gathered with the b's (0 upstream at the b's read);
		// after the b's short read both are upstream before the c's are
		// asked for. With a copy the pause falls inside the second chunk,
		// whose rest the next read fills: 54 KiB of the c's, then their
		// last 10 KiB in the third chunk, where the d's follow.
		ab := sendBufSize + 10<<10
		wantAt := []int{0, 0, ab, ab}
		want := [][]int{{sendBufSize, 10 << 10}, {sendBufSize, 3}}
		if copyCap > 0 {
			wantAt = []int{0, 0, ab, ab, ab + sendBufSize}
			want = [][]int{{sendBufSize, 10 << 10}, {sendBufSize - 10<<10, 10 << 10}, {3}}
		}
		if !reflect.DeepEqual(upstreamAt, wantAt) {
			t.Errorf("copy cap %d: the reads began with %v bytes upstream, want %v", copyCap, upstreamAt, wantAt)
		}
		if !reflect.DeepEqual(dst.Calls(), want) {
			t.Errorf("copy cap %d: writes of %v, want %v", copyCap, dst.Calls(), want)
		}
	}
}

// TestGatheringBorrowsUnderABudget: the buffers gathering borrows beyond a
// body's first are counted per transport; with the budget spent, full
// reads go upstream one at a time, and every borrowed buffer comes back.
func TestGatheringBorrowsUnderABudget(t *testing.T) {
	body := make([]byte, 3*sendBufSize)
	for _, spent := range []bool{false, true} {
		var got bytes.Buffer
		dst := &sizeRecorder{w: &got}
		c := &upstreamConn{Conn: writerConn{w: dst}, send: sender{bufs: newSendBufPool()}}
		if spent {
			c.send.bufs.extra.Store(sendGatherBudget)
		}
		if m, err := c.ReadFrom(&io.LimitedReader{R: bytes.NewReader(body), N: int64(len(body))}); err != nil || m != int64(len(body)) {
			t.Fatalf("spent %v: ReadFrom %d, %v", spent, m, err)
		}
		want := [][]int{{sendBufSize, sendBufSize, sendBufSize}}
		if spent {
			want = [][]int{{sendBufSize}, {sendBufSize}, {sendBufSize}}
		}
		if !reflect.DeepEqual(dst.Calls(), want) {
			t.Errorf("spent %v: writes of %v, want %v", spent, dst.Calls(), want)
		}
		if left, wantLeft := c.send.bufs.extra.Load(), map[bool]int64{false: 0, true: sendGatherBudget}[spent]; left != wantLeft {
			t.Errorf("spent %v: %d buffers borrowed after the send, want %d", spent, left, wantLeft)
		}
	}
}

// writerConn is a net.Conn that only writes, to w.
type writerConn struct {
	net.Conn
	w io.Writer
}

func (c writerConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// WriteVec passes gathered writes on as they come.
func (c writerConn) WriteVec(bufs net.Buffers) (int64, error) {
	return vecio.Write(c.w, bufs, new(net.Buffers))
}

// scriptedReader returns its parts one Read at a time; an empty part is a
// Read of (0, nil), which io.Reader allows.
type scriptedReader struct{ parts [][]byte }

func (r *scriptedReader) Read(p []byte) (int, error) {
	if len(r.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.parts[0])
	if r.parts[0] = r.parts[0][n:]; len(r.parts[0]) == 0 {
		r.parts = r.parts[1:]
	}
	return n, nil
}

// TestSendToEmptyReadKeepsTheCopyInOrder: a Read of (0, nil) at a chunk
// boundary must not leave an unfilled chunk in the copy: the resend would
// send that chunk's stale bytes, another request's body, in its place.
func TestSendToEmptyReadKeepsTheCopyInOrder(t *testing.T) {
	pool := newReplayPool(1 << 20)
	// An earlier request's copy, given back: its chunks hold its bytes.
	other := newReplayBody(io.NopCloser(bytes.NewReader(bytes.Repeat([]byte("A"), 3*replayChunk))), pool, retryBufferMax)
	_, _ = io.ReadAll(other)
	other.Close()
	other.done()

	b1, b2 := bytes.Repeat([]byte("B"), replayChunk), bytes.Repeat([]byte("C"), 40<<10)
	body := append(append([]byte{}, b1...), b2...)
	src := &scriptedReader{parts: [][]byte{b1, {}, b2}}
	rb := newReplayBody(io.NopCloser(src), pool, retryBufferMax)
	guard := &guardedBody{rc: rb}
	var w bytes.Buffer
	c := &upstreamConn{Conn: writerConn{w: &w}, send: sender{bufs: newSendBufPool()}}
	if n, err := c.ReadFrom(&io.LimitedReader{R: guard, N: int64(len(body))}); err != nil || n != int64(len(body)) {
		t.Fatalf("ReadFrom: %d, %v", n, err)
	}
	if _, err := io.Copy(io.Discard, guard); err != nil { // the transport reads on to EOF
		t.Fatal(err)
	}
	if !bytes.Equal(w.Bytes(), body) {
		t.Fatal("the upstream got other bytes than the body")
	}
	again, err := rb.getBody()
	if err != nil {
		t.Fatal(err)
	}
	resent, _ := io.ReadAll(again)
	if !bytes.Equal(resent, body) {
		t.Errorf("the resend carries %d bytes of another request's body", bytes.Count(resent, []byte("A")))
	}
}

// shortWriter writes half of what it is given and reports no error,
// which io.Writer forbids.
type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) / 2, nil }

// TestBodySendStopsOnAShortWrite: a writer that breaks io.Writer's contract
// ends the send with io.ErrShortWrite, with a copy or without, instead of
// sending the rest out of place or looping.
func TestBodySendStopsOnAShortWrite(t *testing.T) {
	body := make([]byte, 3*sendWriteMax)
	for _, copyCap := range []int64{1 << 20, 0} {
		rb := newReplayBody(io.NopCloser(bytes.NewReader(body)), newReplayPool(copyCap), retryBufferMax)
		c := &upstreamConn{Conn: writerConn{w: shortWriter{}}, send: sender{bufs: newSendBufPool()}}
		n, err := c.ReadFrom(&io.LimitedReader{R: &guardedBody{rc: rb}, N: int64(len(body))})
		if !errors.Is(err, io.ErrShortWrite) || n != sendBufSize/2 {
			t.Errorf("copy cap %d: sent %d, %v; want %d, io.ErrShortWrite", copyCap, n, err, sendBufSize/2)
		}
		rb.Close()
		rb.done()
	}
}

// wholeCheck is a writer that, as the body's last byte is written, asks
// the copy for a resend.
type wholeCheck struct {
	rb      *replayBody
	left    int
	lastErr error
}

func (w *wholeCheck) Write(p []byte) (int, error) {
	if w.left -= len(p); w.left == 0 {
		if r, err := w.rb.getBody(); err == nil {
			r.Close()
		} else {
			w.lastErr = err
		}
	}
	return len(p), nil
}

// TestCopyIsWholeBeforeTheLastByteGoesUp: the copy is complete before the
// body's last bytes reach the upstream, which may answer (a 401, a vendor
// 429) at once: the resend must not find the copy still incomplete.
func TestCopyIsWholeBeforeTheLastByteGoesUp(t *testing.T) {
	body := bytes.Repeat([]byte("z"), 2*replayChunk+300)
	rb := newReplayBody(io.NopCloser(&eofWithData{r: bytes.NewReader(body)}), newReplayPool(1<<20), retryBufferMax)
	w := &wholeCheck{rb: rb, left: len(body)}
	c := &upstreamConn{Conn: writerConn{w: w}, send: sender{bufs: newSendBufPool()}}
	if n, err := c.ReadFrom(&io.LimitedReader{R: &guardedBody{rc: rb}, N: int64(len(body))}); err != nil || n != int64(len(body)) {
		t.Fatalf("ReadFrom: %d, %v", n, err)
	}
	if w.lastErr != nil {
		t.Errorf("the copy as the last byte went up: %v", w.lastErr)
	}
	rb.Close()
	rb.done()
}

// eofWithData returns io.EOF with the last bytes, as net/http's server
// body does.
type eofWithData struct{ r *bytes.Reader }

func (e *eofWithData) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == nil && e.r.Len() == 0 {
		err = io.EOF
	}
	return n, err
}

// onRead calls f after each Read of r.
type onRead struct {
	r io.Reader
	f func()
}

func (o onRead) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	o.f()
	return n, err
}

// TestGatheringStopsAtTheExchangeEnd: once the exchange has ended, the
// copy reads nothing more of the caller's body, even with a gathering
// under way: what was read goes out, and the send stops.
func TestGatheringStopsAtTheExchangeEnd(t *testing.T) {
	body := make([]byte, 4*sendBufSize)
	var guard *guardedBody
	reads := 0
	src := onRead{r: bytes.NewReader(body), f: func() { reads++; guard.Close() }}
	rb := newReplayBody(io.NopCloser(src), newReplayPool(1<<20), retryBufferMax)
	defer rb.done()
	defer rb.Close()
	guard = &guardedBody{rc: rb}
	var w bytes.Buffer
	c := &upstreamConn{Conn: writerConn{w: &w}, send: sender{bufs: newSendBufPool()}}
	n, err := c.ReadFrom(&io.LimitedReader{R: guard, N: int64(len(body))})
	if !errors.Is(err, errBodyClosed) || n != sendBufSize || w.Len() != sendBufSize || reads != 1 {
		t.Errorf("sent %d (upstream got %d) in %d reads, %v; want %d in 1 read, errBodyClosed", n, w.Len(), reads, err, sendBufSize)
	}
}
