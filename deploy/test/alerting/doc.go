// Package alerting is the end-to-end proof of faxgate's alerts and dashboard
// (docs/development.md, "The alerting e2e"): real faxgate processes of
// two releases in front of faxsim and Redis, scraped every second by a real
// Prometheus that evaluates the alert rules the Helm chart renders, and a
// real Alertmanager that routes by namespace to webhooks of the test.
//
// Its tests carry the build tag alerting, so `go test ./...` in deploy/test
// leaves them out: run them with `make test-alerting` (the events, the
// dashboard queries and a short soak, in .ci/run) or `make soak` (the ten
// minute soak). Prometheus and Alertmanager come from .ci/install-tools; a
// missing one skips the tests loudly, and fails them when CI is "true".
package alerting
