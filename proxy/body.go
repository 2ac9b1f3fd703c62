package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
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
	eof     atomic.Bool   // the whole body was read (read by the error handler too)
	cleared bool
	// hardDeadline, when set, bounds the whole read however steadily it trickles.
	hardDeadline time.Time
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.timeout > 0 {
		d := time.Now().Add(b.timeout)
		if !b.hardDeadline.IsZero() && b.hardDeadline.Before(d) {
			d = b.hardDeadline
		}
		_ = b.ctl.SetReadDeadline(d)
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
		b.eof.Store(true)
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

// multiReadCloser streams a prefix already read, then the rest of the body.
type multiReadCloser struct {
	io.Reader
	c io.Closer
}

func (m multiReadCloser) Close() error { return m.c.Close() }
