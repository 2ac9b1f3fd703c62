// Package e2e holds end-to-end tests that run several real gateways together
// against a real simulator and real redis-server processes (fleet behaviour,
// Redis outages). It has no code of its own.
package e2e
