package proxy

import (
	"io"
	"net/http"
	"sync"
)

// responseWriter records what the access log and metrics need. Unwrap keeps
// http.ResponseController (flushing, deadlines) working through it.
type responseWriter struct {
	http.ResponseWriter
	ex          *exchange
	status      int
	bytes       int64
	wroteHeader bool
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wroteHeader && code >= 200 {
		w.wroteHeader = true
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.wroteHeader = true
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Unwrap exposes the underlying writer to http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// copyBufSize is the size of the response copy buffers, and the largest
// response body the gateway sends to the caller in one piece (wholeBody).
// Such an answer is one Write, and, on a plain HTTP/1 connection, which
// holds net/http's first flush (listener.Conn.HoldWrites), one write(2) with
// its head. Every write wakes the caller's reader: a 64 KB JSON answer
// copied as it arrives costs three (gobare's too), and read whole but
// written by net/http alone, two. Each response being copied holds one
// buffer; a pooled buffer reused from the GC's spans is zeroed, so it is
// resident whole (the rig's RSS: 27.2 MB on dl64k with 64 connections).
const copyBufSize = 128 << 10

// arrayPool recycles buffers of one array type: the response copy
// buffers (copyBufSize) and the request send buffers (sendBufSize,
// replay_send.go). It pools array pointers, which a slice converts from
// without an allocation (a *[]byte would cost one on every put).
type arrayPool[A any] struct{ p sync.Pool }

func newArrayPool[A any]() *arrayPool[A] {
	ap := &arrayPool[A]{}
	ap.init()
	return ap
}

// init makes the pool hand out new arrays when it has none (for a pool
// inside another type, such as sendBufPool).
func (ap *arrayPool[A]) init() { ap.p.New = func() any { return new(A) } }

func (ap *arrayPool[A]) get() *A  { return ap.p.Get().(*A) }
func (ap *arrayPool[A]) put(a *A) { ap.p.Put(a) }

// wholeBody is an upstream response body of known length, at most
// copyBufSize, that the response copy gets in one Read: each Read fills p
// or reaches the end. The caller cannot use part of such an answer (the
// API answers JSON), and it gets the whole in one Write rather than one
// per socket read. Bodies of unknown length or larger stream as they come.
type wholeBody struct{ rc io.ReadCloser }

func (b *wholeBody) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := b.rc.Read(p[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (b *wholeBody) Close() error { return b.rc.Close() }
