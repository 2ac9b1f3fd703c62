package gateway

// Tracing's timings, for the bounds of the external tests.
const (
	TraceShutdownWait  = traceShutdownWait
	TraceExportTimeout = traceExportTimeout
)
