// Package otlpexport is faxgate's trace exporter: the OpenTelemetry SDK's
// spans, encoded as an OTLP ExportTraceServiceRequest (protobuf) and POSTed
// to a collector over OTLP/HTTP, with retries (docs/tracing.md).
//
// It stands in for OpenTelemetry's otlptracehttp, which links the OTLP
// protocol package and through it gRPC, protobuf's registry and their
// initialisation, whatever the transport: several megabytes of binary, and
// file-backed memory in every process (docs/performance.md). The request
// is written with protowire alone.
package otlpexport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/faxgate/faxgate/internal/base/clock"
)

// Options configure an Exporter. Every field but Headers and UserAgent is
// required.
type Options struct {
	// URL is the collector's traces endpoint, the /v1/traces of an
	// OTLP/HTTP base URL. Its userinfo, if any, is never quoted in an error.
	URL string
	// Headers go with every export: a collector's authorization, a tenant.
	Headers map[string]string
	// UserAgent names the sender; empty leaves Go's default.
	UserAgent string
	// Client sends the exports. Whatever its redirect policy, the
	// exporter follows no redirect: Headers (often a collector's
	// credentials) go to URL and nowhere else, and a redirect is a failed
	// export.
	Client *http.Client
	// Timeout bounds one export, its retries and their waits included.
	Timeout time.Duration
	// RetryFirst is the wait before the first retry; each later wait
	// doubles, up to RetryMax. A collector's Retry-After, when longer,
	// is waited instead.
	RetryFirst, RetryMax time.Duration
	// Clock times the waits between attempts and the Timeout they must fit
	// in.
	Clock clock.Clock
}

// Exporter is an sdktrace.SpanExporter that sends over OTLP/HTTP.
type Exporter struct {
	o       Options
	url     string
	where   string // url without userinfo, for errors
	header  http.Header
	stopped atomic.Bool
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// New returns an Exporter for o. It makes no connection.
func New(o Options) (*Exporter, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("otlpexport: the URL must be an absolute http or https URL")
	}
	if o.Client == nil || o.Clock == nil || o.Timeout <= 0 || o.RetryFirst <= 0 || o.RetryMax < o.RetryFirst {
		return nil, errors.New("otlpexport: client, clock, timeout and retry waits are required")
	}
	h := http.Header{}
	if o.UserAgent != "" {
		h.Set("User-Agent", o.UserAgent)
	}
	for k, v := range o.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/x-protobuf")
	client := *o.Client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.Client = &client
	where := *u
	where.User = nil
	return &Exporter{o: o, url: u.String(), where: where.String(), header: h}, nil
}

// errStopped is the answer to an export after Shutdown.
var errStopped = errors.New("otlpexport: the exporter is shut down")

// ExportSpans sends spans as one request, retrying what the collector may
// take later (see retryable) until the Timeout or ctx ends. The error
// names the endpoint and the last status or connection error, never a
// header's value or what the collector answered.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Load() {
		return errStopped
	}
	// A new body each time: the transport may read a request's body after
	// Do has returned (an answer that came before the body was sent), so a
	// reused buffer could be rewritten under it.
	body := appendRequest(nil, spans)
	if len(body) == 0 {
		return nil // no span, or only nil ones
	}

	ctx, cancel := context.WithTimeout(ctx, e.o.Timeout)
	defer cancel()
	deadline := e.o.Clock.Now().Add(e.o.Timeout)
	backoff := e.o.RetryFirst
	for attempt := 1; ; attempt++ {
		retryAfter, err := e.send(ctx, body)
		if err == nil {
			return nil
		}
		var r retryable
		if !errors.As(err, &r) {
			return e.fail(attempt, err)
		}
		wait := max(backoff, retryAfter)
		if e.o.Clock.Now().Add(wait).After(deadline) {
			return e.fail(attempt, fmt.Errorf("%w; a retry in %v falls outside the export's %v", err, wait, e.o.Timeout))
		}
		if !clock.Sleep(ctx, e.o.Clock, wait) {
			return e.fail(attempt, fmt.Errorf("%w; waiting to retry: %w", err, context.Cause(ctx)))
		}
		backoff = min(2*backoff, e.o.RetryMax)
	}
}

func (e *Exporter) fail(attempts int, err error) error {
	return fmt.Errorf("trace export to %s failed after %d attempt(s): %w", e.where, attempts, err)
}

// drainLimit bounds what is read of an answer's body: enough for an
// ExportTraceServiceResponse, whose partial success is not acted on, and
// for the connection to be kept.
const drainLimit = 4 << 10

// send makes one attempt. It returns nil when the collector took the spans
// (any 2xx), a retryable error when a later attempt may succeed, with the
// collector's Retry-After, and any other error when none will.
func (e *Exporter) send(ctx context.Context, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = e.header.Clone()
	resp, err := e.o.Client.Do(req)
	if err != nil {
		// *url.Error quotes the URL: its own error says enough, and e.fail
		// names the endpoint without userinfo.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return 0, err
		}
		// The collector may be restarting, or a connection was cut.
		return 0, retryable{err}
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return 0, nil
	}
	err = statusError(resp.StatusCode)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retryAfter(resp.Header.Get("Retry-After")), retryable{err}
	}
	return 0, err
}

// Shutdown refuses every later export and closes the client's idle
// connections. An export in flight ends with its own context.
func (e *Exporter) Shutdown(context.Context) error {
	e.stopped.Store(true)
	e.o.Client.CloseIdleConnections()
	return nil
}
