package proxy

import (
	"net/http"
	"sync"
)

// responseWriter records what the access log and metrics need. Unwrap keeps
// http.ResponseController (flushing, deadlines) working through it.
type responseWriter struct {
	http.ResponseWriter
	ex            *exchange
	status        int
	bytes         int64
	wroteHeader   bool
	informational bool // an upstream 1xx was relayed
}

func (w *responseWriter) WriteHeader(code int) {
	if code < 200 && !w.wroteHeader {
		// ReverseProxy relays an upstream 1xx by copying its headers here and
		// then clearing the map: scrub them like any upstream header, and
		// give the final answer its X-Request-Id back below.
		w.informational = true
		if w.ex.tok != nil {
			scrubResponseHeaders(w.Header(), w.ex.tok.Value.Reveal())
		}
	} else if w.informational && !w.wroteHeader {
		w.Header()["X-Request-Id"] = []string{w.ex.id}
	}
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

// copyBufSize is the size of ReverseProxy's copy buffers. With 32 KiB, a
// 64 KB response went to the caller in one write(2) more than gobare's: the
// gateway's longer head pushed the first piece over the server's 4 KiB
// write buffer, and the last few hundred bytes came in a read (and a write)
// of their own. With 64 KiB the second read takes the rest of such a body.
const copyBufSize = 64 << 10

// bufferPool recycles ReverseProxy's copy buffers. It pools array pointers,
// which a slice converts to and from without an allocation (a *[]byte would
// cost one on every Put).
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	bp := &bufferPool{}
	bp.p.New = func() any { return new([copyBufSize]byte) }
	return bp
}

func (bp *bufferPool) Get() []byte { return bp.p.Get().(*[copyBufSize]byte)[:] }

func (bp *bufferPool) Put(b []byte) {
	if cap(b) == copyBufSize { // only what Get handed out
		bp.p.Put((*[copyBufSize]byte)(b[:copyBufSize]))
	}
}
