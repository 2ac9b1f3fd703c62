package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// retryBufferMax is the largest request body the gateway buffers, only so it
// can resend it once after an upstream 401 (contract section 5).
const retryBufferMax = 1 << 20

// requestBody wraps a caller's body: it counts bytes, enforces
// server.max_body_bytes on bodies of unknown length, and pushes the
// connection's read deadline forward before every read, so a body that
// trickles slower than the read timeout is cut off (408) while a large body
// arriving steadily is not.
type requestBody struct {
	rc      io.ReadCloser
	ctl     *http.ResponseController
	timeout time.Duration
	limit   int64
	n       int64
	err     *gatewayError // why reading stopped, if the gateway stopped it
	cleared bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.timeout > 0 {
		_ = b.ctl.SetReadDeadline(time.Now().Add(b.timeout))
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.n > b.limit {
		b.err = errBodyTooLarge
		return 0, b.err
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.clearDeadline()
	default:
		b.err = classifyBodyError(err)
		return n, b.err
	}
	return n, err
}

// clearDeadline removes the body deadline once the body is complete: the
// server's background read that notices a vanished client must not trip over it.
func (b *requestBody) clearDeadline() {
	if b.timeout > 0 && !b.cleared {
		b.cleared = true
		_ = b.ctl.SetReadDeadline(time.Time{})
	}
}

func (b *requestBody) Close() error { return b.rc.Close() }

func classifyBodyError(err error) *gatewayError {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return errBodyTimeout
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errBodyTooLarge
	}
	return errBodyRead
}

// bufferedBody is a fully read body that can be replayed (GetBody). Its
// buffer returns to the pool only after the transport has closed it, so a
// transport still writing it can never see the buffer reused.
type bufferedBody struct {
	*bytes.Reader
	buf    *bytes.Buffer
	pool   *sync.Pool
	mu     sync.Mutex
	open   int // readers handed out and not closed
	done   bool
	reused bool
}

func (bb *bufferedBody) reader() io.ReadCloser {
	bb.mu.Lock()
	bb.open++
	bb.mu.Unlock()
	return &bufferedReader{Reader: bytes.NewReader(bb.buf.Bytes()), bb: bb}
}

type bufferedReader struct {
	*bytes.Reader
	bb     *bufferedBody
	closed bool
}

func (r *bufferedReader) Close() error {
	if !r.closed {
		r.closed = true
		r.bb.mu.Lock()
		r.bb.open--
		r.bb.maybeRelease()
		r.bb.mu.Unlock()
	}
	return nil
}

// release is called when the request is over; the buffer goes back to the
// pool as soon as no reader is open.
func (bb *bufferedBody) release() {
	bb.mu.Lock()
	bb.done = true
	bb.maybeRelease()
	bb.mu.Unlock()
}

func (bb *bufferedBody) maybeRelease() {
	if bb.done && bb.open == 0 && !bb.reused {
		bb.reused = true
		if bb.buf.Cap() <= 2*retryBufferMax {
			bb.buf.Reset()
			bb.pool.Put(bb.buf)
		}
	}
}

// multiReadCloser streams a prefix already read, then the rest of the body.
type multiReadCloser struct {
	io.Reader
	c io.Closer
}

func (m multiReadCloser) Close() error { return m.c.Close() }
