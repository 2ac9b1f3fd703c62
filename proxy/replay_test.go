package proxy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReplayBodyKeepsACopyWhileStreaming: the first attempt reads the
// caller's body as it comes; the resend reads the same bytes from the copy;
// the chunks go back only when the handler and every attempt are done, in
// whatever order they finish.
func TestReplayBodyKeepsACopyWhileStreaming(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 5*replayChunk/2/16) // two and a half chunks: three
	for _, order := range [][]string{{"first", "resend", "handler"}, {"handler", "first", "resend"}, {"resend", "handler", "first"}} {
		t.Run(strings.Join(order, "-"), func(t *testing.T) {
			pool := newReplayPool(1 << 20)
			rb := newReplayBody(io.NopCloser(bytes.NewReader(body)), pool, retryBufferMax)
			if _, err := rb.getBody(); !errors.Is(err, errNotReplayable) {
				t.Fatalf("a body not yet read through is replayable: %v", err)
			}
			got, err := io.ReadAll(rb)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("first attempt read %d bytes, %v", len(got), err)
			}
			if pool.held.Load() != 3*replayChunk {
				t.Errorf("held %d, want three chunks", pool.held.Load())
			}
			again, err := rb.getBody()
			if err != nil {
				t.Fatal(err)
			}
			resent, err := io.ReadAll(again)
			if err != nil || !bytes.Equal(resent, body) {
				t.Fatalf("resend read %d bytes, %v", len(resent), err)
			}
			for i, who := range order {
				switch who {
				case "first":
					rb.Close()
					rb.Close() // the transport and the server both close it
				case "resend":
					again.Close()
				case "handler":
					rb.done()
				}
				if held := pool.held.Load(); (i < 2) != (held > 0) {
					t.Fatalf("after %v: %d bytes held", order[:i+1], held)
				}
			}
			// A transport that reads a body it has closed (HTTP/2 closes from
			// another goroutine) gets an error, never chunks that went back.
			if n, err := again.Read(make([]byte, 10)); n != 0 || !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("read after release: %d, %v", n, err)
			}
		})
	}
}

// TestReplayBodyCaps: a body over the request's cap, or one that would pass
// the process-wide cap, streams on without a copy and is not replayable;
// what it had copied goes back at once.
func TestReplayBodyCaps(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100_000)
	t.Run("request cap", func(t *testing.T) {
		pool := newReplayPool(1 << 20)
		rb := newReplayBody(io.NopCloser(bytes.NewReader(body)), pool, 50_000)
		if got, _ := io.ReadAll(rb); len(got) != len(body) {
			t.Fatalf("streamed %d bytes", len(got))
		}
		if _, err := rb.getBody(); err == nil || pool.held.Load() != 0 {
			t.Errorf("over the request cap: replayable %v, %d held", err == nil, pool.held.Load())
		}
	})
	t.Run("process cap", func(t *testing.T) {
		pool := newReplayPool(2 * replayChunk)
		other := newReplayBody(io.NopCloser(bytes.NewReader(body[:replayChunk])), pool, retryBufferMax)
		_, _ = io.ReadAll(other) // holds one chunk
		rb := newReplayBody(io.NopCloser(bytes.NewReader(body)), pool, retryBufferMax)
		if got, _ := io.ReadAll(rb); len(got) != len(body) {
			t.Fatalf("streamed %d bytes", len(got))
		}
		if _, err := rb.getBody(); err == nil {
			t.Error("a body past the process cap is replayable")
		}
		if pool.held.Load() != replayChunk {
			t.Errorf("held %d, want only the other request's chunk", pool.held.Load())
		}
		other.done()
		other.Close()
		if pool.held.Load() != 0 {
			t.Errorf("held %d after everyone finished", pool.held.Load())
		}
	})
}

// TestReplayBodyEmpty: an empty body of unknown length (chunked, "0\r\n\r\n")
// has no chunks, and its resend reads an empty body, not an error.
func TestReplayBodyEmpty(t *testing.T) {
	pool := newReplayPool(1 << 20)
	rb := newReplayBody(io.NopCloser(bytes.NewReader(nil)), pool, retryBufferMax)
	if got, err := io.ReadAll(rb); err != nil || len(got) != 0 {
		t.Fatalf("first attempt: %q, %v", got, err)
	}
	again, err := rb.getBody()
	if err != nil {
		t.Fatalf("an empty body read to its end is not replayable: %v", err)
	}
	if got, err := io.ReadAll(again); err != nil || len(got) != 0 {
		t.Fatalf("resend: %q, %v; want an empty body", got, err)
	}
	rb.attemptDone()
	rb.done()
	again.Close()
	if n, err := again.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("read after release: %d, %v", n, err)
	}
}

// TestReadAllCountsUnderTheCap: whole-body reads (small bodies, confirmed
// and audited ones) draw on the same cap as the resend copies; only a read
// policy needs (force) passes it, and every byte is released.
func TestReadAllCountsUnderTheCap(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100<<10)
	for _, c := range []struct {
		name     string
		limit    int64
		hint     int64
		force    bool
		complete bool
	}{
		{"fits, unknown length", 1 << 20, -1, false, true},
		{"fits, known length", 1 << 20, int64(len(body)), false, true},
		{"over the cap, unknown length", 64 << 10, -1, false, false},
		{"over the cap, known length", 64 << 10, int64(len(body)), false, false},
		{"over the cap, forced", 64 << 10, -1, true, true},
		{"no cap, forced", 0, int64(len(body)), true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := newReplayPool(c.limit)
			var reserved int64
			data, complete, err := pool.readAll(bytes.NewReader(body), retryBufferMax, c.hint, c.force, &reserved)
			if err != nil || complete != c.complete {
				t.Fatalf("readAll: complete %v err %v, want complete %v", complete, err, c.complete)
			}
			if complete && !bytes.Equal(data, body) {
				t.Fatalf("read %d bytes, want the %d of the body", len(data), len(body))
			}
			if held := pool.held.Load(); held != reserved || (!c.force && held > c.limit) || reserved < int64(cap(data)) {
				t.Fatalf("held %d, reserved %d, buffer %d, cap %d", held, reserved, cap(data), c.limit)
			}
			pool.release(reserved)
			if held := pool.held.Load(); held != 0 {
				t.Fatalf("held %d after release", held)
			}
		})
	}
}

// TestChunkArenaHandsOutItsRegionOnly: nothing is mapped until a chunk is
// asked for; the chunks are distinct pieces of one region, as many as fit
// in the cap and no more; a returned chunk is the next one handed out.
func TestChunkArenaHandsOutItsRegionOnly(t *testing.T) {
	a := &chunkArena{size: 3}
	if a.mem != nil {
		t.Fatal("region mapped before any chunk was asked for")
	}
	var got []*[replayChunk]byte
	for range 3 {
		c := a.get()
		if c == nil {
			t.Fatalf("chunk %d of 3 refused", len(got)+1)
		}
		c[0], c[replayChunk-1] = byte(len(got)+1), byte(len(got)+1) // writable end to end
		got = append(got, c)
	}
	if c := a.get(); c != nil {
		t.Fatal("a fourth chunk from a region of three")
	}
	for i, c := range got {
		if c[0] != byte(i+1) || c[replayChunk-1] != byte(i+1) {
			t.Errorf("chunk %d overlaps another", i)
		}
		if &c[0] != &a.mem[i*replayChunk] {
			t.Errorf("chunk %d is not the region's chunk %d", i, i)
		}
	}
	a.put(got[1])
	if c := a.get(); c != got[1] {
		t.Error("the returned chunk was not the next one handed out")
	}
}

// TestReplayPoolGivesBackItsReservation: a chunk the arena cannot give
// leaves nothing counted under the cap.
func TestReplayPoolGivesBackItsReservation(t *testing.T) {
	pool := newReplayPool(2 * replayChunk)
	pool.chunks.size = 1 // the region holds one chunk though the cap allows two
	if pool.get() == nil {
		t.Fatal("first chunk refused")
	}
	if pool.get() != nil {
		t.Fatal("a chunk beyond the region")
	}
	if held := pool.held.Load(); held != replayChunk {
		t.Errorf("held %d after a refused chunk, want %d", held, replayChunk)
	}
}
