package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/faxgate/faxgate/tokencache"
)

// noTokens is a token source that has none.
type noTokens struct{}

func (noTokens) Token(context.Context) (*tokencache.Token, error) { return nil, errors.New("no token") }
func (noTokens) Invalidate(*tokencache.Token) bool                { return false }
func (noTokens) Current() *tokencache.Token                       { return nil }

// keptBody is a streamed body read to its end with its copy kept, as after
// a first attempt.
func keptBody(t *testing.T) (*replayPool, *replayBody) {
	pool := newReplayPool(1 << 20)
	rb := newReplayBody(io.NopCloser(bytes.NewReader(make([]byte, 100<<10))), pool, retryBufferMax)
	if _, err := io.ReadAll(rb); err != nil {
		t.Fatal(err)
	}
	return pool, rb
}

// TestResendWithoutTokenClosesItsBody: a resend after a vendor 429 whose
// token cannot be had never reaches the transport; the reader over the
// copy it was given must still be closed, or the copy is held for good.
func TestResendWithoutTokenClosesItsBody(t *testing.T) {
	pool, rb := keptBody(t)
	again, err := rb.getBody()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "http://upstream.invalid/v1/x", again)
	at := &authTransport{tokens: noTokens{}}
	if _, err := at.roundTrip(req, &exchange{}); !errors.Is(err, errNoToken) {
		t.Fatalf("roundTrip: %v", err)
	}
	rb.attemptDone()
	rb.done() // the handler's finish
	if held := pool.held.Load(); held != 0 {
		t.Errorf("%d bytes of copy held after the exchange", held)
	}
}

// refusingProxy answers every request as an egress proxy refusing it.
type refusingProxy struct{}

func (refusingProxy) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return nil, &ProxyRefusedError{Status: http.StatusProxyAuthRequired}
}

// pastDeadline is a context not yet cancelled whose deadline has passed:
// a backoff never fits in it.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Second), true }

// TestUnsentRetryThatGivesUpClosesItsBody: an attempt the proxy refused
// (unsent) takes a reader over the copy to send again; when the backoff
// does not fit in the deadline, that reader must be closed.
func TestUnsentRetryThatGivesUpClosesItsBody(t *testing.T) {
	pool, rb := keptBody(t)
	ex := &exchange{}
	ex.leg.replay = rb
	ex.leg.guard.rc = rb
	req, _ := http.NewRequestWithContext(pastDeadline{context.Background()}, "POST", "http://upstream.invalid/v1/x", &ex.leg.guard)
	req.GetBody = rb.getBody
	at := &authTransport{next: refusingProxy{}, retryUnsent: 2}
	if _, err := at.attempt(req, ex); err == nil {
		t.Fatal("attempt succeeded")
	}
	rb.attemptDone()
	rb.done()
	if held := pool.held.Load(); held != 0 {
		t.Errorf("%d bytes of copy held after the exchange", held)
	}
}
