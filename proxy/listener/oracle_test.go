package listener

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// genRequest is a generated request as Go must parse it.
type genRequest struct {
	method, path string
	body         []byte
	refused      bool
}

// generate writes a random request to w.
func generate(r *rand.Rand, i int, w *bytes.Buffer) genRequest {
	g := genRequest{method: []string{"GET", "POST", "PUT", "PATCH", "DELETE"}[r.IntN(5)], path: "/r/" + strconv.Itoa(i)}
	size := r.IntN(300)
	if r.IntN(8) == 0 {
		size = 16<<10 + r.IntN(40<<10)
	}
	for len(g.body) < size {
		g.body = append(g.body, []string{"a", "\r\n", "\n", "0\r\n\r\n", sSmuggled, "Transfer-Encoding: chunked\r\n"}[r.IntN(6)]...)
	}
	g.body = g.body[:size]
	kind, proto := r.IntN(6), "HTTP/1.1"
	if kind == 5 {
		proto = "HTTP/1.0"
	}
	fmt.Fprintf(w, "%s %s %s\r\nHost: x\r\n", g.method, g.path, proto)
	switch kind {
	case 0:
		g.body = nil
		w.WriteString("\r\n")
	case 1:
		fmt.Fprintf(w, "Content-Length: %d\r\n\r\n%s", len(g.body), g.body)
	case 2:
		w.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := g.body; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(5000))
			ext := []string{"", ";a=b", "; x=\"y;z\""}[r.IntN(3)]
			fmt.Fprintf(w, "%x%s\r\n%s\r\n", n, ext, rest[:n])
			rest = rest[n:]
		}
		w.WriteString([]string{"0\r\n\r\n", "0\r\nX-T: 1\r\n\r\n"}[r.IntN(2)])
	case 3: // refused: the marker, and the body framed by Content-Length
		g.refused = true
		fmt.Fprintf(w, "Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", len(g.body), g.body)
	case 4: // refused without a length: no body
		g.refused, g.body = true, nil
		w.WriteString("Transfer-Encoding: gzip\r\n\r\n")
	default: // HTTP/1.0: Go ignores Transfer-Encoding, so no body
		g.body = nil
		w.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	}
	return g
}

func TestFramingConnAgreesWithGoParser(t *testing.T) {
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 42))
		var stream bytes.Buffer
		var want []genRequest
		var ends []int
		for i := range 60 {
			want = append(want, generate(r, i, &stream))
			ends = append(ends, stream.Len())
		}
		for _, aligned := range []bool{true, false} {
			t.Run(fmt.Sprintf("seed %d aligned %v", seed, aligned), func(t *testing.T) {
				var steps []step
				in, start := stream.Bytes(), 0
				for _, end := range ends {
					if !aligned && r.IntN(2) == 0 {
						continue // let this message share its pieces with the next
					}
					for start < end {
						n := min(end-start, 1+r.IntN(3000))
						steps = append(steps, step{data: in[start : start+n]})
						start += n
					}
				}
				steps = append(steps, split(in[start:], 1+r.IntN(3000))...)
				c := newSniffer(steps, sniffBufSize)
				br := bufio.NewReader(c)
				for i, w := range want {
					req, err := http.ReadRequest(br)
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					body, err := io.ReadAll(req.Body)
					if err != nil {
						t.Fatalf("request %d body: %v", i, err)
					}
					if req.Method != w.method || req.URL.Path != w.path || !bytes.Equal(body, w.body) || (verdictOf(req) == RefusedFraming) != w.refused {
						t.Fatalf("request %d = %s %s refused=%v body %d bytes; want %s %s refused=%v body %d bytes",
							i, req.Method, req.URL.Path, (verdictOf(req) == RefusedFraming), len(body), w.method, w.path, w.refused, len(w.body))
					}
					if aligned && br.Buffered() == 0 && (c.state != stHead || c.r != c.end) {
						t.Fatalf("after request %d: state %d, %d bytes held; want stHead and nothing held", i, c.state, c.end-c.r)
					}
				}
				if _, err := http.ReadRequest(br); err != io.EOF {
					t.Fatalf("after the last request: %v, want io.EOF", err)
				}
			})
		}
	}
}

// isRename reports whether out[i:] holds the marker where in[i:] held a
// Transfer-Encoding header name (any ASCII case) at the start of a line.
func isRename(in, out []byte, i int) bool {
	// Over exactly 17 bytes EqualFold can only match ASCII: no non-ASCII
	// rune folds to a letter of this name in as many bytes.
	const te = "transfer-encoding"
	return i > 0 && i+len(te) < len(in) && in[i-1] == '\n' && in[i+len(te)] == ':' &&
		strings.EqualFold(string(in[i:i+len(te)]), te) && string(out[i:i+len(te)]) == framingMarker
}

func FuzzFramingConn(f *testing.F) {
	for _, tc := range framingCases {
		in, _ := marked(tc.stream)
		f.Add([]byte(in), []byte{7, 1, 200}, false)
	}
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x"), []byte{3}, true)                                               // ends mid-head: EOF releases it
	f.Add([]byte("\r\n\r\n\r\n"), []byte{1}, false)                                                           // empty lines only
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), []byte{2}, false) // bad chunk size
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n"), []byte{9}, true)
	f.Add([]byte(sPost+"\r\nPOST /m HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"), []byte{60, 0, 9}, false)     // 0 is a timeout
	f.Add([]byte(sGet+"GET /x\r\n"+sGet), []byte{5}, false)                                                                // no version
	f.Add([]byte(sPost+"POST /y HTTP/2.0\r\nContent-Length: 1\r\n\r\nz"), []byte{11, 3}, true)                             // unsupported version
	f.Add([]byte(sGet+"GET /z HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("p", 33<<10)+"\r\n\r\n"), []byte{200}, false) // head over 32 KiB
	for _, tc := range refusedCases {
		f.Add([]byte(tc.pass+tc.refused), []byte{5, 1, 200}, false)
	}
	oracle := newGoOracle(f)
	f.Fuzz(func(t *testing.T, in, cuts []byte, smallBuf bool) {
		var steps []step
		readSize := 4096
		if len(cuts) > 0 {
			readSize = 1 + int(cuts[0])%64
		}
		for rest, k := in, 0; len(rest) > 0; k++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(n, int(cuts[k%len(cuts)]))
			}
			if n == 0 {
				steps = append(steps, step{err: os.ErrDeadlineExceeded})
				if k < len(cuts) {
					continue
				}
				n = 1 // cuts of only zeros still make progress
			}
			steps = append(steps, step{data: rest[:n]})
			rest = rest[n:]
		}
		bufSize := sniffBufSize
		if smallBuf {
			bufSize = 16
		}
		run := func(steps []step, bufSize, readSize int) (out []byte, refusedAt int64) { // bounded: no infinite loop
			done := make(chan error, 1)
			go func() {
				var err error
				c := newSniffer(steps, bufSize)
				out, err = drain(c, readSize)
				refusedAt = c.refusedAt
				done <- err
			}()
			select {
			case err := <-done:
				if err != io.EOF {
					t.Fatalf("err = %v, want io.EOF", err)
				}
				return out, refusedAt
			case <-time.After(10 * time.Second):
				t.Fatal("the sniffer did not finish")
				return nil, 0
			}
		}
		got, at := run(steps, bufSize, readSize)
		// Up to a refused head, the output is the input with refused
		// Transfer-Encoding names renamed; from it on, one stand-in request.
		passed := got
		if at >= 0 {
			if at > int64(len(in)) || at > int64(len(got)) {
				t.Fatalf("refused at %d, past the input (%d) or output (%d)", at, len(in), len(got))
			}
			passed = got[:at]
			checkStandIn(t, oracle, got[at:], in[at:])
		} else if len(got) != len(in) {
			t.Fatalf("%d bytes out for %d in", len(got), len(in))
		}
		for i := 0; i < len(passed); i++ {
			if isRename(in, got, i) {
				i += len(framingMarker) - 1
			} else if got[i] != in[i] {
				t.Fatalf("byte %d changed: %q -> %q", i, in[i], got[i])
			}
		}
		if whole, wat := run([]step{{data: in}}, sniffBufSize, 4096); !bytes.Equal(whole, got) || wat != at {
			t.Fatalf("the output depends on how the input was split:\n  split %q (refused at %d)\n  whole %q (refused at %d)", got, at, whole, wat)
		}
	})
}

// checkStandIn checks the stand-in request stand that replaced the input
// from rest on: exactly one request, closing the connection, carrying the
// refusal code that an independent reading of rest, with Go's own version
// parser, calls for; for a head refused for its fields, one that a real
// net/http server refuses too, for the reason the kind names.
func checkStandIn(t *testing.T, oracle *goOracle, stand, rest []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(stand))
	req, err := http.ReadRequest(br)
	if err != nil {
		t.Fatalf("stand-in %q unreadable: %v", stand, err)
	}
	if br.Buffered() != 0 || !req.Close || req.ContentLength != 0 {
		t.Fatalf("stand-in %q: want one bodiless request that closes the connection", stand)
	}
	got, want := req.Header.Get(refusedMarker), refusalFor(rest)
	if want == "" && (got == refusedHeader || got == refusedContentLength || got == refusedExpectation) {
		want = oracle.refusal(t, rest)
	}
	if got != want {
		t.Fatalf("stand-in says %q, want %q for %q", got, want, rest[:min(len(rest), 200)])
	}
}

// refusalFor is the refusal the sniffer owes the head starting rest
// ("" for none): the request line is split as Go splits it and its version
// parsed by http.ParseHTTPVersion; then the head's size is counted up to and
// including its empty line.
func refusalFor(rest []byte) string {
	nl := bytes.IndexByte(rest, '\n')
	if nl < 0 || nl+1 > MaxHeaderBytes {
		if len(rest) > MaxHeaderBytes {
			return "headers_too_large"
		}
		return ""
	}
	line := strings.TrimSuffix(string(rest[:nl]), "\r")
	_, afterMethod, ok1 := strings.Cut(line, " ")
	_, proto, ok2 := strings.Cut(afterMethod, " ")
	if !ok1 || !ok2 {
		return "invalid_request"
	}
	major, minor, ok := http.ParseHTTPVersion(proto)
	switch {
	case !ok:
		return "invalid_request"
	case major != 1 || minor > 1:
		return "http_version_not_supported"
	}
	end := -1
	for i := nl; i < len(rest) && end < 0; i++ {
		switch {
		case rest[i] != '\n':
		case i+1 < len(rest) && rest[i+1] == '\n':
			end = i + 2
		case i+2 < len(rest) && rest[i+1] == '\r' && rest[i+2] == '\n':
			end = i + 3
		}
	}
	if end > MaxHeaderBytes || end < 0 && len(rest) > MaxHeaderBytes {
		return "headers_too_large"
	}
	return ""
}

// goOracle is a real net/http server whose handler only marks that it ran:
// the judge of which heads Go's server refuses before any handler.
type goOracle struct{ addr string }

func newGoOracle(tb testing.TB) *goOracle {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Oracle-Reached", "1")
		w.WriteHeader(299)
	})}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return &goOracle{addr: ln.Addr().String()}
}

// serve sends head, then nothing (the write side is closed), and reports
// whether the handler ran, and the status answered.
func (o *goOracle) serve(tb testing.TB, head []byte) (reached bool, status int) {
	tb.Helper()
	c, err := net.Dial("tcp", o.addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(head); err != nil {
		tb.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false, 0 // closed without an answer: refused all the same
	}
	resp.Body.Close()
	return resp.Header.Get("X-Oracle-Reached") == "1", resp.StatusCode
}

// refusal is the kind a head refused for its fields calls for, judged by
// Go itself: the head starting rest is sent to the real server with a
// request line Go takes whatever the original's target (only the version,
// and CONNECT, matter to the field rules) and every Transfer-Encoding
// renamed as the sniffer may rename it (so Go's 501 does not hide the
// rest). The server must refuse it; a 417 calls for expectation_failed; a
// Content-Length error from http.ReadRequest (which runs before the
// server's own checks) for invalid_content_length; anything else for
// invalid_header.
func (o *goOracle) refusal(tb testing.TB, rest []byte) string {
	tb.Helper()
	nl := bytes.IndexByte(rest, '\n')
	end := bytes.Index(rest, []byte("\n\n"))
	if e := bytes.Index(rest, []byte("\n\r\n")); e >= 0 && (end < 0 || e < end) {
		end = e + 1
	}
	if nl < 0 || end < 0 {
		tb.Fatalf("refused for its fields, but the head %q never ends", rest[:min(len(rest), 200)])
	}
	line := strings.TrimSuffix(string(rest[:nl]), "\r")
	method, _, _ := strings.Cut(line, " ")
	if method != "CONNECT" {
		method = "GET"
	}
	head := []byte(method + " /" + line[strings.LastIndexByte(line, ' '):] + "\r\n")
	fields := bytes.Clone(rest[nl+1 : end+2])
	for i := 0; i+len("transfer-encoding:") <= len(fields); i++ {
		if (i == 0 || fields[i-1] == '\n') && strings.EqualFold(string(fields[i:i+len("transfer-encoding:")]), "transfer-encoding:") {
			copy(fields[i:], framingMarker)
		}
	}
	head = append(head, fields...)
	reached, status := o.serve(tb, head)
	if reached {
		tb.Fatalf("refused, but Go's server serves the head %q", head)
	}
	if status == http.StatusExpectationFailed {
		return refusedExpectation
	}
	_, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil && (strings.Contains(err.Error(), "multiple Content-Length") ||
		strings.HasPrefix(err.Error(), "bad Content-Length") || strings.HasPrefix(err.Error(), "invalid empty Content-Length")) {
		return refusedContentLength
	}
	return refusedHeader
}

// The refusals for a head's fields are Go's: a real net/http server refuses
// every such head of refusedCases, for the reason its kind names, and serves
// every head of oddHeads.
func TestSniffedHeadRefusalsAreGoServerRefusals(t *testing.T) {
	oracle := newGoOracle(t)
	n := 0
	for _, tc := range refusedCases {
		if tc.code != refusedHeader && tc.code != refusedContentLength && tc.code != refusedExpectation {
			continue
		}
		n++
		if got := oracle.refusal(t, []byte(tc.refused)); got != tc.code {
			t.Errorf("%s: Go's reading calls for %q, the case says %q", tc.name, got, tc.code)
		}
	}
	if n < 20 {
		t.Fatalf("only %d cases of heads refused for their fields", n)
	}
	for _, head := range oddHeads {
		if reached, status := oracle.serve(t, []byte(head)); !reached {
			t.Errorf("Go's server answers %d to %q, which the sniffer passes", status, head)
		}
	}
}
