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
	body := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80,000 bytes: three chunks
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
