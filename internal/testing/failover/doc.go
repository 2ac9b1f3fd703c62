// Package failover holds the tests that fail Redis over for real under two
// gateway replicas and steady traffic (docs/deployment.md, Redis in
// production): a Sentinel failover on request, a killed Sentinel primary, a
// killed cluster primary, an address repointed to a new primary while
// pooled connections still reach the demoted one, and a failover that
// loses the last writes. Each counts what the simulator saw (requests,
// token calls, tokens presented) and judges the promises: no request
// lost, decisions fleet-wide again within 15 s, at most one renewal, no
// token the upstream did not issue. It has no code of its own.
package failover
