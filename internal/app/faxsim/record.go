package faxsim

import (
	"bytes"
	"net/http"
	"time"
)

const (
	// ringSize is how many recent requests Requests keeps.
	ringSize = 1000
	// recordBodyMax is how much of each body is kept: enough to assert on any
	// documented request without holding every multi-MB fax in memory.
	recordBodyMax = 64 << 10
)

// Recorded is one request as faxsim received it, before any auth check: what
// the gateway actually put on the wire.
type Recorded struct {
	Method string
	// Path is the request path exactly as received (the request-target's
	// path, never decoded or cleaned).
	Path string
	// RawQuery is the query string as received, without the "?".
	RawQuery string
	// Host is the Host header; Go's server moves it out of Header.
	Host string
	// Header is a copy of the request headers.
	Header http.Header
	// Body is the first 64 KiB of the body.
	Body []byte
	// BodySize is the full body length, so a truncated Body can still prove
	// that a multi-MB upload arrived whole.
	BodySize int64
	// Time is when the request arrived, by the injected clock.
	Time time.Time
}

// clone deep-copies r so callers cannot alter the simulator's history.
func (r Recorded) clone() Recorded {
	r.Header = r.Header.Clone()
	r.Body = bytes.Clone(r.Body)
	return r
}

// record captures r. The body is copied so the record does not pin a
// multi-MB request buffer.
func record(r *http.Request, path string, body []byte, size int64, now time.Time) Recorded {
	if len(body) > recordBodyMax {
		body = body[:recordBodyMax]
	}
	return Recorded{
		Method:   r.Method,
		Path:     path,
		RawQuery: r.URL.RawQuery,
		Host:     r.Host,
		Header:   r.Header.Clone(),
		Body:     bytes.Clone(body),
		BodySize: size,
		Time:     now,
	}
}

// ring holds the most recent ringSize records.
type ring struct {
	buf  []Recorded
	next int // where the next record goes once buf is full
}

func (g *ring) add(r Recorded) {
	if len(g.buf) < ringSize {
		g.buf = append(g.buf, r)
		return
	}
	g.buf[g.next] = r
	g.next = (g.next + 1) % ringSize
}

// list returns copies, oldest first.
func (g *ring) list() []Recorded {
	out := make([]Recorded, 0, len(g.buf))
	for i := range g.buf {
		out = append(out, g.buf[(g.next+i)%len(g.buf)].clone())
	}
	return out
}

func (g *ring) reset() { *g = ring{} }

// Requests returns the recent requests (up to 1000) as received, newest
// last. /_sim/ control requests are not recorded.
func (s *Sim) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring.list()
}
