// Package tracing holds the end-to-end test of tracing against a real
// Jaeger (docs/tracing.md): Jaeger v2 with memory storage, a real gateway
// with Redis in front of faxsim, and the traces read back through Jaeger's
// query API. It runs with the build tag "tracing" (make test-tracing), as
// it needs the jaeger binary that .ci/install-tools builds. It has no code
// of its own.
package tracing
