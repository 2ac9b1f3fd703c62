package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/faxgate/faxgate/policy/route"
)

// smallBodyMax is the largest body of known length read before it is
// forwarded (prepareBody); larger ones stream.
const smallBodyMax = 32 << 10

// retryBufferMax is the largest request body the gateway buffers, only so it
// can resend it once after an upstream 401 (docs/tokens.md, The 401 resend).
const retryBufferMax = 1 << 20

// requestBody wraps a caller's body: it counts bytes, enforces
// server.max_body_bytes on bodies of unknown length, and pushes the
// connection's read deadline forward as it is read, so a body that pauses
// longer than the read timeout is cut off (408) while a large body arriving
// steadily is not.
type requestBody struct {
	rc      io.ReadCloser
	ctl     readDeadliner // the caller's connection (an *http.ResponseController)
	timeout time.Duration
	limit   int64
	n       int64
	err     *route.Error // why reading stopped, if the gateway stopped it
	eof     atomic.Bool  // the whole body was read (read by upstreamError too)
	cleared bool
	// hardDeadline, when set, bounds the whole read however steadily it trickles.
	hardDeadline time.Time
	deadline     time.Time // the read deadline last set (pushDeadline)
}

// readDeadliner sets the read deadline of the caller's connection.
type readDeadliner interface{ SetReadDeadline(time.Time) error }

func (b *requestBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.eof.Load() {
		// The transport reads on past the end (net/http's writeBody reads
		// a body of known length to EOF once more): the deadline cleared
		// at the end must stay cleared, or the server's background read
		// times out and cancels the request while the upstream answers.
		return 0, io.EOF
	}
	if b.timeout > 0 {
		b.pushDeadline()
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

// pushDeadline makes sure the coming read may wait the whole read timeout.
// The deadline is moved only when less than that is left, and then an
// eighth further, so a body arriving steadily moves it about once per
// eighth of the timeout rather than on each of its reads (a 1 MiB upload
// makes some 35): the connection's timer is updated under a lock. A pause
// is thus cut off after at least read_timeout and at most 1⅛ times it.
func (b *requestBody) pushDeadline() {
	now := time.Now()
	if !b.deadline.IsZero() && !b.deadline.Before(now.Add(b.timeout)) {
		return
	}
	d := now.Add(b.timeout + b.timeout/8)
	if !b.hardDeadline.IsZero() && b.hardDeadline.Before(d) {
		if b.deadline.Equal(b.hardDeadline) {
			return
		}
		d = b.hardDeadline
	}
	b.deadline = d
	_ = b.ctl.SetReadDeadline(d)
}

// clearDeadline removes the body deadline once the body is complete: the
// server's background read that notices a vanished client must not trip over it.
func (b *requestBody) clearDeadline() {
	if b.timeout > 0 && !b.cleared {
		b.cleared, b.deadline = true, time.Time{}
		_ = b.ctl.SetReadDeadline(time.Time{})
	}
}

func (b *requestBody) Close() error { return b.rc.Close() }

func classifyBodyError(err error) *route.Error {
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

// prepareBody is the body stage, once the decisions allow the request as far
// as its body (policy.Outcome.NeedBody). A body streams upstream as it arrives,
// with a copy kept for a resend after a 401 (replay.go) when it is at most
// retryBufferMax and the resend memory allows. A body of at most
// smallBodyMax with a known length, and the body of a route whose checks
// read it (whole: policy.confirm, or the number and order IDs of the audit
// line), is read whole first. It completes the body's facts: what was
// read whole, and how to tell that the caller left while the rest is unread.
func (ex *exchange) prepareBody(whole bool) *route.Error {
	h, r, l, f := ex.h, ex.facts.Request, &ex.leg, &ex.facts
	f.BodyReady = true
	l.body = requestBody{rc: r.Body, limit: h.opts.MaxBodyBytes}
	if !ex.conn.BodyInMemory() {
		// The body may still be on its way: every read pushes the read
		// deadline forward (a body already read whole needs none).
		l.body.ctl, l.body.timeout = http.NewResponseController(ex.w.ResponseWriter), h.opts.ReadTimeout
	}
	if r.ContentLength > retryBufferMax {
		r.Body = &l.body
		f.Departure = ex
		return nil
	}
	// A small body of known length is read first, into a fresh buffer the
	// size of the body: it costs little, and a body net/http knows to be in
	// memory goes upstream in the same write(2) as the headers.
	small := r.ContentLength > 0 && r.ContentLength <= smallBodyMax
	if !whole && !small {
		l.replay = newReplayBody(&l.body, h.replay, retryBufferMax)
		r.Body, r.GetBody = l.replay, l.replay.getBody
		f.Departure = ex
		return nil
	}
	// Buffering has an overall deadline too, so a body trickled in just under
	// the read timeout cannot hold a goroutine and a buffer indefinitely.
	l.body.hardDeadline = ex.start.Add(h.opts.UpstreamTimeout)
	// A fresh buffer per request, counted under server.resend_buffer_bytes
	// with every other body copy: the transport may read it after the
	// handler returns (a resend's body), so it is never handed to another.
	// The body of a request policy allowed on a sensitive route is read
	// even when the memory is spoken for (counted, never refused): the
	// confirmation needs it, and the audit line of a delete that is
	// carried out must name it, whatever refused callers hold.
	read, complete, err := h.replay.readAll(&l.body, retryBufferMax, r.ContentLength, whole, &l.reserved)
	l.body.hardDeadline = time.Time{}
	if err != nil {
		if l.body.err != nil {
			return l.body.err
		}
		return errBodyRead
	}
	if !complete {
		// The body memory is spoken for: this body streams without a copy
		// (no resend after a 401, no IDs on the audit line), after what was
		// read.
		if len(read) == 0 {
			r.Body = &l.body
		} else {
			r.Body = multiReadCloser{Reader: io.MultiReader(bytes.NewReader(read), &l.body), c: &l.body}
		}
		f.Departure = ex
		return nil
	}
	if len(read) > retryBufferMax {
		// Unknown length and over the buffer: stream what was read, then the rest.
		r.Body = multiReadCloser{Reader: io.MultiReader(bytes.NewReader(read), &l.body), c: &l.body}
		f.Departure = ex
		return nil
	}
	l.buffered, f.Body = read, read
	r.ContentLength = int64(len(read))
	r.TransferEncoding = nil
	if len(read) == 0 {
		r.Body = http.NoBody
		return nil
	}
	// The transport sends this body on the first attempt (see send); a
	// resend gets a fresh reader from GetBody.
	l.memReader.Reset(read)
	l.memBody = io.NopCloser(&l.memReader)
	r.Body = l.memBody
	r.GetBody = l.getBody
	return nil
}

// Gone implements limit.Departure for a request waiting with its body
// still unread: whether its caller has closed its connection
// (listener.Conn.PeerClosed).
func (ex *exchange) Gone() bool { return ex.conn.PeerClosed() }

// getBody is the buffered body's http.Request.GetBody.
func (l *leg) getBody() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.buffered)), nil
}
