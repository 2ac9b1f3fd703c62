package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/base/otlpexport"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/tokencache"
)

// Tracing's timings (docs/tracing.md). Spans are batched in the background:
// a request only puts its spans in a queue, which drops them when full, so
// an unreachable or slow collector costs no request any time.
const (
	traceQueueSize     = 4096
	traceBatchSize     = 512
	traceBatchTimeout  = 2 * time.Second  // a span is exported within this
	traceExportTimeout = 10 * time.Second // one export, retries included
	traceRetryFirst    = time.Second      // the first retry of a failed export waits this
	traceRetryMax      = 4 * time.Second  // and the later ones at most this
	traceShutdownWait  = 2 * time.Second  // flushing at exit: what is not sent by then is dropped
	exportWarnEvery    = time.Minute      // a failing collector is logged once per this
)

// tracerName is the instrumentation scope of every span faxgate makes.
const tracerName = "github.com/faxgate/faxgate"

// newTracing builds the tracer provider of cfg.Tracing: faxgate's OTLP/HTTP
// (protobuf) exporter behind a batch processor, the sampler of
// requestSampler, and a resource with service.name and service.version only.
// It makes no connection; the exporter dials on its first batch.
func newTracing(cfg config.Tracing, getenv func(string) (string, bool), version string, log *zap.Logger) (*sdktrace.TracerProvider, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil { // validated by config
		return nil, fmt.Errorf("tracing.endpoint: invalid URL")
	}
	headers := map[string]string{}
	if cfg.HeadersEnv != "" {
		v, ok := getenv(cfg.HeadersEnv)
		if !ok {
			return nil, fmt.Errorf("tracing.headers_env: environment variable %q is not set", cfg.HeadersEnv)
		}
		if headers, err = config.ParseOTLPHeaders(v); err != nil {
			return nil, fmt.Errorf("tracing.headers_env: environment variable %q %s", cfg.HeadersEnv, err.Error())
		}
	}
	// The SDK's batch processor keeps real time, and so do the exporter's
	// retries: the gateway's clock (a fake one in tests) drives renewals,
	// not tracing.
	exp, err := otlpexport.New(otlpexport.Options{
		URL:        (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: path.Join("/", u.Path, "v1/traces")}).String(),
		Headers:    headers,
		UserAgent:  "faxgate/" + version,
		Client:     exportClient(),
		Timeout:    traceExportTimeout,
		RetryFirst: traceRetryFirst,
		RetryMax:   traceRetryMax,
		Clock:      clock.Real{},
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", cfg.ServiceName),
		attribute.String("service.version", version))
	return sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(newBatcher(exp, log)),
		sdktrace.WithSampler(requestSampler(cfg.SampleRatio)),
		sdktrace.WithResource(res),
	), nil
}

// newBatcher is the batch processor in front of exp, whose flush at
// shutdown ends when Shutdown's context does (docs/tracing.md).
//
// OpenTelemetry's batch processor returns from Shutdown when its context
// ends, but goes on exporting what is queued in the background, each batch
// with the whole export timeout and its retries: up to eight batches of
// ten seconds against a collector that is down. Once Shutdown has returned,
// the export in flight is cancelled and the rest is dropped unsent.
func newBatcher(exp sdktrace.SpanExporter, log *zap.Logger) sdktrace.SpanProcessor {
	q := &quietExporter{next: exp, log: log, done: make(chan struct{})}
	return boundedFlush{
		SpanProcessor: sdktrace.NewBatchSpanProcessor(q,
			sdktrace.WithMaxQueueSize(traceQueueSize),
			sdktrace.WithMaxExportBatchSize(traceBatchSize),
			sdktrace.WithBatchTimeout(traceBatchTimeout),
			sdktrace.WithExportTimeout(traceExportTimeout)),
		stop: q.stop,
	}
}

// boundedFlush stops its exporter once the processor's Shutdown returns.
type boundedFlush struct {
	sdktrace.SpanProcessor
	stop func()
}

func (b boundedFlush) Shutdown(ctx context.Context) error {
	err := b.SpanProcessor.Shutdown(ctx)
	b.stop()
	return err
}

// exportClient is the exporter's own HTTP client: its own connections
// (never the upstream's), no proxy from the environment, and every phase
// bounded. It follows no redirect: headers_env's values (often a
// collector's credentials) go to tracing.endpoint and nowhere else, and a
// redirect is a failed export (docs/tracing.md).
func exportClient() *http.Client {
	return &http.Client{
		Timeout: traceExportTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		Transport: bodilessErrors{&http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: traceExportTimeout,
		}},
	}
}

// bodilessErrors drops the body of every answer but a success before the
// exporter reads it. The exporter quotes an error answer's body in the
// error it returns, which the gateway logs; a collector (or a proxy in
// front of it) that echoes the request's headers would put headers_env's
// secret in that line. The status alone says what went wrong.
type bodilessErrors struct{ next http.RoundTripper }

func (b bodilessErrors) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := b.next.RoundTrip(r)
	if err != nil || res.StatusCode/100 == 2 {
		return res, err
	}
	// A little is drained so the connection can be reused.
	_, _ = io.CopyN(io.Discard, res.Body, 4<<10)
	res.Body.Close()
	res.Body, res.ContentLength = http.NoBody, 0
	res.Header.Del("Content-Length")
	res.Header.Del("Content-Encoding")
	return res, nil
}

// requestSampler is parent-based (docs/tracing.md): a request whose
// traceparent is sampled is traced, one whose traceparent is not is not,
// and one without a traceparent is traced at ratio. A token renewal, a
// trace of its own, is always recorded: renewals are few, and each matters.
func requestSampler(ratio float64) sdktrace.Sampler {
	return sampler{requests: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))}
}

type sampler struct{ requests sdktrace.Sampler }

func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == tokencache.RenewSpan && !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
	}
	return s.requests.ShouldSample(p)
}

func (s sampler) Description() string {
	return "faxgate{token.renew:always," + s.requests.Description() + "}"
}

// quietExporter logs a failing export at most once per exportWarnEvery and
// reports success to the batch processor, which would otherwise hand every
// failure to OpenTelemetry's process-wide error handler (a plain stderr
// line per batch). The batch is dropped either way.
//
// Once stopped (the processor's Shutdown has returned), the export in
// flight is cancelled and later ones are dropped without a try.
type quietExporter struct {
	next     sdktrace.SpanExporter
	log      *zap.Logger
	done     chan struct{} // closed by stop
	stopOnce sync.Once

	mu       sync.Mutex
	lastWarn time.Time
	down     bool // the last export failed
}

// stop cancels the export in flight and drops every later one.
func (e *quietExporter) stop() { e.stopOnce.Do(func() { close(e.done) }) }

func (e *quietExporter) stopped() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (e *quietExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped() {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := e.next.ExportSpans(ctx, spans)
	if e.stopped() {
		// Cut short at shutdown: the collector's health is unknown.
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		if e.down {
			e.down = false
			e.log.Info("trace collector reachable again")
		}
		return nil
	}
	e.down = true
	if now := time.Now(); e.lastWarn.IsZero() || now.Sub(e.lastWarn) >= exportWarnEvery {
		// The error names the endpoint and the reason, never a header.
		e.log.Warn("trace export failed; spans are dropped until the collector answers",
			zap.Int("spans", len(spans)), zap.Error(err))
		e.lastWarn = now
	}
	return nil
}

func (e *quietExporter) Shutdown(ctx context.Context) error { return e.next.Shutdown(ctx) }
