// Package vecio writes several buffers to a connection in one call: one
// writev(2) on a TCP connection. On loopback every write also runs the
// receiver's side of TCP and wakes its reader, so one write of several
// buffers costs markedly less than one write each (docs/performance.md).
package vecio

import (
	"errors"
	"io"
	"net"
)

// ErrInvalidWrite is a Write result io.Writer forbids: a count below zero
// or above the buffer's length.
var ErrInvalidWrite = errors.New("vecio: invalid write result")

// Writer writes several buffers in one call, as a TCP connection does with
// writev(2). Tests implement it to see the writes as the kernel would.
type Writer interface {
	WriteVec(bufs net.Buffers) (int64, error)
}

// Gathers reports whether Write sends several buffers to w in one call.
func Gathers(w io.Writer) bool {
	switch w.(type) {
	case Writer, *net.TCPConn:
		return true
	}
	return false
}

// Write writes vec to w: in one call on a Writer, in one writev(2) on a TCP
// connection, through nb (memory that outlives the call, so that nothing
// is allocated for it), else one buffer at a time. It returns the bytes
// written; fewer than vec holds only with an error (a short write without
// one, which io.Writer forbids, ends it with io.ErrShortWrite).
func Write(w io.Writer, vec [][]byte, nb *net.Buffers) (int64, error) {
	if len(vec) == 0 {
		return 0, nil
	}
	switch w := w.(type) {
	case Writer:
		return w.WriteVec(vec)
	case *net.TCPConn:
		if len(vec) > 1 {
			*nb = vec
			n, err := nb.WriteTo(w)
			*nb = nil
			return n, err
		}
	}
	var n int64
	for _, p := range vec {
		k, err := w.Write(p)
		if k < 0 || k > len(p) {
			return n, ErrInvalidWrite
		}
		n += int64(k)
		if err != nil {
			return n, err
		}
		if k < len(p) {
			return n, io.ErrShortWrite
		}
	}
	return n, nil
}
