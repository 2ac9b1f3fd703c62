package mixin

import "fmt"

// An alert is one rule of the generated file, before overrides. Every
// aggregation keeps cluster, namespace and job (a series without cluster
// gains none), never a bare sum() or max(), so two releases in one Prometheus
// are told apart and Alertmanager can route by namespace. Where replicas
// share state (the token, the budget, the certificate) an alert is per
// release; where a replica is at fault, per pod.
type alert struct {
	Name        string
	Expr        string
	For         string
	Severity    string
	Summary     string
	Description string
	// FirstStep is what to do first, for the README's alert table; the
	// runbook (docs/runbook.md) has the rest.
	FirstStep string
	// Threshold is the number the alert fires at, written into Expr where
	// it says thresholdMark; an operator overrides it per release
	// (AlertOverride.Threshold). Unit says what it counts (for the docs and
	// the override's error messages); empty for an alert without one.
	Threshold float64
	Unit      string
	// PerRefreshBefore, when above 0, makes the default threshold this
	// share of token.refresh_before in seconds (Options.RefreshBefore):
	// the token alerts follow the release's renewal settings.
	PerRefreshBefore float64
}

// thresholdMark stands for an alert's threshold in its expression until
// Rules writes the number there (the Helm chart writes its own release's).
const thresholdMark = "$threshold"

// scope is the grouping every release-level aggregation keeps.
const scope = "cluster, namespace, job"

// alerts are faxgate's alert rules, in the order the file lists them; the
// runbook (docs/runbook.md) has one heading per name.
func alerts(s sel) []alert {
	tokenLeft := fmt.Sprintf("max by (%s) (%s > 0) - time()", scope, s.m("faxgate_token_expiry_timestamp_seconds"))
	reqs := s.m("faxgate_requests_total")
	reqs5xx := s.m("faxgate_requests_total", `code=~"5.."`)
	notUploads := fmt.Sprintf(`route!~"%s"`, uploadRoutes)
	return []alert{
		{
			Name:      "FaxgateDown",
			FirstStep: "Check the pods (`kubectl -n <namespace> get pods`, events, restarts); a crash loop at start is usually config: `faxgate check`.",
			// Only while some target is up: with none up, FaxgateAbsent
			// pages alone (one outage, one page).
			Expr:        fmt.Sprintf("avg by (%[1]s) (%[2]s) < %[3]s\nand max by (%[1]s) (%[2]s) > 0", scope, s.m("up"), thresholdMark),
			Threshold:   upFraction,
			Unit:        "the share of the release's targets up (0 to 1)",
			For:         "5m",
			Severity:    "critical",
			Summary:     "Most of a faxgate release's replicas cannot be scraped.",
			Description: "Only {{ $value | humanizePercentage }} of the targets of {{ $labels.namespace }}/{{ $labels.job }} have answered a scrape for 5 minutes; the others are down.",
		},
		{
			Name:      "FaxgateAbsent",
			FirstStep: "Is the Deployment scaled above zero, and does the ServiceMonitor still select the `<fullname>-metrics` Service?",
			// absent() names the release by the selector's equality
			// matchers (job, and namespace where the chart renders it);
			// the second half keeps the labels of targets that exist but
			// are all down.
			Expr:        fmt.Sprintf("absent(%[2]s)\nor max by (%[1]s) (%[2]s) == 0", scope, s.m("up")),
			For:         "5m",
			Severity:    "critical",
			Summary:     "No faxgate replica is up.",
			Description: "For 5 minutes no target of {{ with $labels.namespace }}{{ . }}/{{ end }}{{ $labels.job }} has answered a scrape: every replica is down, or none is discovered at all (scaled to zero, deleted, or the ServiceMonitor no longer matches).",
		},
		{
			Name:        "FaxgateNotReady",
			FirstStep:   "Read the pod's `/readyz` reason on the admin port.",
			Expr:        s.m("faxgate_ready") + " == 0",
			For:         "10m",
			Severity:    "warning",
			Summary:     "A faxgate replica runs but is not ready.",
			Description: "Pod {{ $labels.namespace }}/{{ $labels.pod }} has answered 503 on /readyz for 10 minutes: no valid token, no certificate, or draining.",
		},
		{
			Name:        "FaxgateNoReadyReplica",
			FirstStep:   "Read `/readyz` on any pod; no token is the usual reason (see the token alerts).",
			Expr:        fmt.Sprintf("max by (%s) (%s) == 0", scope, s.m("faxgate_ready")),
			For:         "3m",
			Severity:    "critical",
			Summary:     "No replica of a faxgate release is ready.",
			Description: "Every replica of {{ $labels.namespace }}/{{ $labels.job }} has been not ready for 3 minutes; its callers get errors.",
		},
		{
			Name:             "FaxgateTokenRenewalOverdue",
			FirstStep:        "Check `faxgate_token_refresh_total` by result and the renewal log lines; the token still works.",
			Expr:             fmt.Sprintf("%s < %s", tokenLeft, thresholdMark),
			Threshold:        tokenTicketSeconds,
			PerRefreshBefore: tokenTicketShare,
			Unit:             "seconds left on the token (default: three quarters of token.refresh_before)",
			For:              "2m",
			Severity:         "warning",
			Summary:          "The upstream token has not been renewed in time.",
			Description:      "The token of {{ $labels.namespace }}/{{ $labels.job }} expires in {{ $value | humanizeDuration }} and has not been renewed; renewal starts when token.refresh_before remains.",
		},
		{
			Name:             "FaxgateTokenExpiringSoon",
			FirstStep:        "Fix renewal now: is the key in the Secret right, does the upstream's `/v1/auth` answer?",
			Expr:             fmt.Sprintf("%s < %s", tokenLeft, thresholdMark),
			Threshold:        tokenPageSeconds,
			PerRefreshBefore: tokenPageShare,
			Unit:             "seconds left on the token (default: half of token.refresh_before)",
			For:              "1m",
			Severity:         "critical",
			Summary:          "The upstream token expires soon and has not been renewed.",
			Description:      "The token of {{ $labels.namespace }}/{{ $labels.job }} expires in {{ $value | humanizeDuration }}; after that every request fails with 503 token_unavailable.",
		},
		{
			Name:        "FaxgateNoValidToken",
			FirstStep:   "`faxgate_token_refresh_total{result}`: `invalid_key` is the key, `error` is egress, DNS or the vendor.",
			Expr:        fmt.Sprintf("max by (%s) (%s) - time() <= 0", scope, s.m("faxgate_token_expiry_timestamp_seconds")),
			For:         "5m",
			Severity:    "critical",
			Summary:     "faxgate holds no valid upstream token.",
			Description: "No replica of {{ $labels.namespace }}/{{ $labels.job }} has held a valid token for 5 minutes; callers get 503 token_unavailable.",
		},
		{
			Name:      "FaxgateTokenRenewalFailing",
			FirstStep: "Check that the upstream is reachable from the pods and the vendor's status.",
			Expr: fmt.Sprintf("sum by (%[1]s) (increase(%[2]s[15m])) > 0\nand sum by (%[1]s) (increase(%[3]s[15m])) == 0", scope,
				s.m("faxgate_token_refresh_total", `result="error"`), s.m("faxgate_token_refresh_total", `result="ok"`)),
			For:         "10m",
			Severity:    "warning",
			Summary:     "Token renewals are failing.",
			Description: "{{ $labels.namespace }}/{{ $labels.job }} has failed to renew the token for 10 minutes with no success (token endpoint unreachable or erroring).",
		},
		{
			Name:        "FaxgateAPIKeyRejected",
			FirstStep:   "Put the right key in the `apiKey.existingSecret` Secret; the next renewal uses it, no restart.",
			Expr:        fmt.Sprintf("sum by (%s) (increase(%s[10m])) > 0", scope, s.m("faxgate_token_refresh_total", `result="invalid_key"`)),
			Severity:    "critical",
			Summary:     "The upstream rejected faxgate's API key.",
			Description: "{{ $labels.namespace }}/{{ $labels.job }} was told the API secret key is invalid; no new token can be had until the key is fixed.",
		},
		{
			Name:      "FaxgateUpstreamErrors",
			FirstStep: "Break the route's 5xx down by code: 502/504 are made by the gateway, others are the vendor's.",
			Expr: fmt.Sprintf("sum by (%[1]s, route) (rate(%[2]s[5m]))\n  / sum by (%[1]s, route) (rate(%[3]s[5m])) > %[4]s\nand sum by (%[1]s, route) (increase(%[3]s[5m])) >= %[5]d",
				scope, reqs5xx, reqs, thresholdMark, minRequests),
			Threshold:   upstreamErrorRatio,
			Unit:        "the share of a route's requests answered 5xx (0 to 1)",
			For:         "10m",
			Severity:    "warning",
			Summary:     "Many requests on a route end in 5xx.",
			Description: "{{ $value | humanizePercentage }} of the requests on {{ $labels.route }} of {{ $labels.namespace }}/{{ $labels.job }} have ended in 5xx for 10 minutes.",
		},
		{
			Name:      "FaxgateUpstreamFailing",
			FirstStep: "Read the access lines' `error`: `upstream_*` is the vendor or the way to it, `token_unavailable` the token.",
			Expr: fmt.Sprintf("sum by (%[1]s) (rate(%[2]s[5m]))\n  / sum by (%[1]s) (rate(%[3]s[5m])) > %[4]s\nand sum by (%[1]s) (increase(%[3]s[5m])) >= %[5]d",
				scope, reqs5xx, reqs, thresholdMark, minRequests),
			Threshold:   upstreamFailingRatio,
			Unit:        "the share of all requests answered 5xx (0 to 1)",
			For:         "5m",
			Severity:    "critical",
			Summary:     "Most requests through faxgate fail.",
			Description: "{{ $value | humanizePercentage }} of all the requests through {{ $labels.namespace }}/{{ $labels.job }} have ended in 5xx for 5 minutes.",
		},
		{
			Name:      "FaxgateRequestsRefused",
			FirstStep: "Break `faxgate_denied_total` down by reason: `unidentified_caller` is the mesh or `callers`, `forbidden` the policy, `token_unavailable` the token.",
			Expr: fmt.Sprintf("sum by (%[1]s) (rate(%[2]s[5m]))\n  / sum by (%[1]s) (rate(%[3]s[5m])) > %[4]s\nand sum by (%[1]s) (increase(%[3]s[5m])) >= %[5]d",
				scope, s.m("faxgate_denied_total", `reason=~"`+massRefusalReasons+`"`), reqs, thresholdMark, minRequests),
			Threshold:   refusedRatio,
			Unit:        "the share of all requests refused unidentified_caller, forbidden or token_unavailable (0 to 1)",
			For:         "10m",
			Severity:    "warning",
			Summary:     "faxgate itself refuses most requests.",
			Description: "{{ $value | humanizePercentage }} of the requests to {{ $labels.namespace }}/{{ $labels.job }} have been refused by faxgate itself (unidentified_caller, forbidden or token_unavailable) for 10 minutes: a bad reload, a mesh change that lost the callers' identity, or no token.",
		},
		{
			Name:      "FaxgateUpstreamSlow",
			FirstStep: "Check the vendor's status; raise callers' timeouts if they give up first.",
			Expr: fmt.Sprintf("histogram_quantile(0.99, sum by (%[1]s, le) (rate(%[2]s[5m]))) > %[3]s\nand sum by (%[1]s) (increase(%[4]s[5m])) >= %[5]d",
				scope, s.m("faxgate_upstream_duration_seconds_bucket", notUploads), thresholdMark,
				s.m("faxgate_upstream_duration_seconds_count", notUploads), minRequests),
			Threshold:   upstreamSlowSeconds,
			Unit:        "seconds (the 99th percentile of upstream response time)",
			For:         "15m",
			Severity:    "warning",
			Summary:     "The upstream answers slowly.",
			Description: "The 99th percentile of upstream response time of {{ $labels.namespace }}/{{ $labels.job }} (upload routes aside) has been {{ $value | humanizeDuration }} for 15 minutes.",
		},
		{
			Name:        "FaxgateUpstream401Resends",
			FirstStep:   "Look for a second user of the API key, or replicas renewing apart (memory store, Redis down).",
			Expr:        fmt.Sprintf("sum by (%s, route) (increase(%s[15m])) > %s", scope, s.m("faxgate_upstream_401_retries_total"), thresholdMark),
			Threshold:   resendsPer15m,
			Unit:        "resends on a route in 15 minutes",
			For:         "15m",
			Severity:    "warning",
			Summary:     "The upstream keeps rejecting faxgate's token.",
			Description: "{{ $labels.route }} of {{ $labels.namespace }}/{{ $labels.job }} needed more than 10 resends after a 401 in 15 minutes, for 15 minutes: the token is being revoked or replicas renew separately.",
		},
		{
			Name:      "FaxgateUpstreamProxyFailing",
			FirstStep: "Read the `the egress proxy ...` warn lines' `reason` and `status`: `auth` is the proxyAuth Secret, `unreachable` the proxy's address or the egress NetworkPolicy, `refused` the proxy's own rules.",
			// Failures in every 3-minute window for 5 minutes: one failure
			// (a proxy restarting, a connection dropped, which resends
			// usually hide) keeps the rate above 0 for one window, shorter
			// than the for:, and never fires; a proxy that refuses every
			// request does at the fifth minute.
			Expr:        fmt.Sprintf("sum by (%s, reason) (rate(%s[%s])) > 0", scope, s.m("faxgate_upstream_proxy_errors_total"), proxyFailureWindow),
			For:         "5m",
			Severity:    "warning",
			Summary:     "The egress proxy keeps failing.",
			Description: "The egress proxy of {{ $labels.namespace }}/{{ $labels.job }} has failed ({{ $labels.reason }}) again and again for 5 minutes: requests through it that their resends cannot save get 502 upstream_unavailable, and token renewals through it fail.",
		},
		{
			Name:      "FaxgateCallerRateLimited",
			FirstStep: "Tell the caller's owners; raise its `rate_limit` if the traffic is legitimate.",
			Expr: fmt.Sprintf("sum by (%[1]s, caller) (rate(%[2]s[5m]))\n  / sum by (%[1]s, caller) (rate(%[3]s[5m])) > %[4]s\nand sum by (%[1]s, caller) (increase(%[3]s[5m])) >= %[5]d",
				scope, s.m("faxgate_rate_limited_total"), reqs, thresholdMark, minRequests),
			Threshold:   rateLimitedRatio,
			Unit:        "the share of a caller's requests refused rate_limited (0 to 1)",
			For:         "15m",
			Severity:    "info",
			Summary:     "A caller is being rate limited.",
			Description: "{{ $value | humanizePercentage }} of {{ $labels.caller }}'s requests to {{ $labels.namespace }}/{{ $labels.job }} have been refused with 429 rate_limited for 15 minutes.",
		},
		{
			Name:        "FaxgateTokenStoreErrors",
			FirstStep:   "Fix Redis: address, password Secret, TLS, egress NetworkPolicy.",
			Expr:        fmt.Sprintf("sum by (%s) (increase(%s[10m])) > 0", scope, s.m("faxgate_token_store_errors_total")),
			Severity:    "warning",
			Summary:     "faxgate cannot use Redis for the shared token.",
			Description: "{{ $labels.namespace }}/{{ $labels.job }} has had Redis errors on its token store in the last 10 minutes; each replica serves with the token it holds and renews on its own.",
		},
		{
			Name:        "FaxgateRateLimitFallback",
			FirstStep:   "Fix Redis (see FaxgateTokenStoreErrors); keep `replicas_hint` equal to the replicas.",
			Expr:        s.m("faxgate_rate_limit_backend_up") + " == 0",
			For:         "10m",
			Severity:    "warning",
			Summary:     "Rate limits are enforced per replica, not fleet-wide.",
			Description: "Pod {{ $labels.namespace }}/{{ $labels.pod }} has not reached Redis for its rate limits for 10 minutes and limits locally at rps / replicas_hint.",
		},
		{
			Name:      "FaxgateConfigReloadFailing",
			FirstStep: "Find the `config reload rejected` log line; run `faxgate check` on the ConfigMap's file.",
			Expr: fmt.Sprintf("sum without (result) (increase(%s[10m])) > 0\nor %s == 0",
				s.m("faxgate_config_reload_total", `result="error"`), s.m("faxgate_config_last_reload_successful")),
			Severity:    "warning",
			Summary:     "faxgate's configuration file does not load.",
			Description: "Pod {{ $labels.namespace }}/{{ $labels.pod }} rejected the configuration file on disk; it keeps running the last good one.",
		},
		{
			Name:        "FaxgateConfigRestartRequired",
			FirstStep:   "`kubectl rollout restart deployment/<fullname>`.",
			Expr:        s.m("faxgate_config_restart_required") + " == 1",
			For:         "1h",
			Severity:    "warning",
			Summary:     "faxgate's configuration file holds changes that need a restart.",
			Description: "Pod {{ $labels.namespace }}/{{ $labels.pod }} has run for an hour with settings on disk that only a restart applies.",
		},
		{
			Name:        "FaxgateCertificateExpiringSoon",
			FirstStep:   "Check the cert-manager Certificate, or `faxgate_tls_acme_failures_total` and the logs.",
			Expr:        fmt.Sprintf("min by (%s, domain) (%s) - time() < %s * 86400", scope, s.m("faxgate_tls_certificate_expiry_timestamp_seconds"), thresholdMark),
			Threshold:   certTicketDays,
			Unit:        "days left on the certificate (fractions allowed: 0.25 is 6 hours)",
			For:         "1h",
			Severity:    "warning",
			Summary:     "faxgate's TLS certificate is close to its expiry and has not been renewed.",
			Description: "The certificate for {{ $labels.domain }} of {{ $labels.namespace }}/{{ $labels.job }} expires in {{ $value | humanizeDuration }} and has not been renewed.",
		},
		{
			Name:        "FaxgateCertificateExpiryCritical",
			FirstStep:   "Renew the certificate now; faxgate reloads the Secret by itself.",
			Expr:        fmt.Sprintf("min by (%s, domain) (%s) - time() < %s * 86400", scope, s.m("faxgate_tls_certificate_expiry_timestamp_seconds"), thresholdMark),
			Threshold:   certPageDays,
			Unit:        "days left on the certificate (fractions allowed: 0.25 is 6 hours)",
			For:         "10m",
			Severity:    "critical",
			Summary:     "faxgate's TLS certificate is about to expire.",
			Description: "The certificate for {{ $labels.domain }} of {{ $labels.namespace }}/{{ $labels.job }} expires in {{ $value | humanizeDuration }}.",
		},
		{
			Name:      "FaxgateSensitiveRouteDenied",
			FirstStep: "Read the audit lines (`msg: audit`); ask the caller's owners why it tried.",
			Expr: fmt.Sprintf("sum by (%s, caller, route, reason) (increase(%s[10m])) > 0", scope,
				s.m("faxgate_denied_total", `route="numbers.delete"`)),
			Severity:    "info",
			Summary:     "A caller tried to delete a phone number and was denied.",
			Description: "{{ $labels.caller }} was denied numbers.delete ({{ $labels.reason }}) by {{ $labels.namespace }}/{{ $labels.job }}; the audit log has each attempt.",
		},
		{
			Name:      "FaxgateUpstreamThrottled",
			FirstStep: "Compare `upstream_budget.limits` with the vendor's plan; look for other clients of the tenant.",
			Expr: fmt.Sprintf("sum by (%[1]s, route) (increase(%[2]s[15m])) > %[3]s\nor max by (%[1]s, route) (%[4]s) > %[5]d",
				scope, s.m("faxgate_upstream_throttled_total"), thresholdMark, s.m("faxgate_upstream_hold_seconds"), holdSeconds),
			Threshold:   throttledPer15m,
			Unit:        "vendor 429s on a route in 15 minutes",
			For:         "2m",
			Severity:    "warning",
			Summary:     "The upstream keeps answering 429.",
			Description: "The vendor has refused requests on {{ $labels.route }} of {{ $labels.namespace }}/{{ $labels.job }} with 429 more than 3 times in 15 minutes, or holds it for minutes; faxgate holds the route until its Retry-After passes.",
		},
		{
			Name:      "FaxgateUpstreamBudgetNearlySpent",
			FirstStep: "`GET /budget` shows who spends it: cap or re-share, or raise the plan.",
			// The ratio is as of the window's last decision: read only
			// while that decision is recent, so that the alert ends when
			// traffic stops instead of keeping the last value.
			Expr: fmt.Sprintf("max by (%[1]s, limit, route) (\n  %[2]s > %[3]s\n  and time() - %[4]s < %[5]d\n)",
				scope, s.m("faxgate_upstream_budget_used_ratio"), thresholdMark, s.m("faxgate_upstream_budget_used_ratio_timestamp_seconds"), budgetFreshSeconds),
			Threshold:   budgetUsedRatio,
			Unit:        "the used share of a limit's window (0 to 1)",
			For:         "15m",
			Severity:    "warning",
			Summary:     "An upstream budget limit is nearly used up.",
			Description: "{{ $value | humanizePercentage }} of limit {{ $labels.limit }} (route \"{{ $labels.route }}\") of {{ $labels.namespace }}/{{ $labels.job }} has been in use for 15 minutes while requests kept coming; callers beyond their reserves will be refused.",
		},
		{
			Name:        "FaxgateCallerOverBudgetShare",
			FirstStep:   "Give the caller a `reserve` if its work matters more; otherwise it backs off on `Retry-After`.",
			Expr:        fmt.Sprintf("sum by (%s, caller, limit) (rate(%s[5m])) > 0", scope, s.m("faxgate_upstream_budget_refused_total")),
			For:         "15m",
			Severity:    "info",
			Summary:     "A caller keeps exceeding its share of the upstream budget.",
			Description: "{{ $labels.caller }} has been refused by limit {{ $labels.limit }} of {{ $labels.namespace }}/{{ $labels.job }} (upstream_budget_exhausted) for 15 minutes.",
		},
		{
			Name:        "FaxgateUpstreamBudgetLocal",
			FirstStep:   "Fix Redis; keep `replicas_hint` equal to the replicas meanwhile.",
			Expr:        fmt.Sprintf("rate(%s[5m]) > 0", s.m("faxgate_upstream_budget_fallback_total")),
			For:         "10m",
			Severity:    "warning",
			Summary:     "The upstream budget is enforced per replica, not fleet-wide.",
			Description: "Pod {{ $labels.namespace }}/{{ $labels.pod }} has decided its upstream budget locally (requests / replicas_hint) for 10 minutes: Redis is unreachable or slow.",
		},
		{
			Name: "FaxgateUpstreamBudgetWaitsNearMax",
			Expr: fmt.Sprintf("histogram_quantile(0.9, sum by (%[1]s, le) (rate(%[2]s[10m])))\n  > %[3]s * max by (%[1]s) (%[4]s > 0)\nand sum by (%[1]s) (increase(%[5]s[10m])) >= %[6]d",
				scope, s.m("faxgate_upstream_budget_wait_seconds_bucket"), thresholdMark, s.m("faxgate_upstream_budget_max_wait_seconds"),
				s.m("faxgate_upstream_budget_wait_seconds_count"), minWaits),
			Threshold:   waitNearMax,
			Unit:        "the share of upstream_budget.max_wait the 90th percentile wait reaches (0 to 1)",
			For:         "15m",
			Severity:    "warning",
			FirstStep:   "`GET /budget` shows who waits on which limit: raise the vendor plan, or re-share the budget.",
			Summary:     "Requests wait for the upstream budget almost as long as they may.",
			Description: "90% of the requests of {{ $labels.namespace }}/{{ $labels.job }} that waited for the upstream budget have waited over 80% of upstream_budget.max_wait for 15 minutes ({{ $value | humanizeDuration }}): the vendor's limits are too tight for the traffic, and requests that would wait longer get 429.",
		},
		{
			Name:        "FaxgateBackgroundLoopPanicked",
			FirstStep:   "Find the `background loop panicked` line and report its stack with the version (a bug).",
			Expr:        fmt.Sprintf("increase(%s[10m]) > 0", s.m("faxgate_background_panics_total")),
			Severity:    "warning",
			Summary:     "A faxgate background loop panicked.",
			Description: "Loop {{ $labels.loop }} of pod {{ $labels.namespace }}/{{ $labels.pod }} recovered from a panic in the last 10 minutes and carries on; the \"background loop panicked\" log line has the stack.",
		},
	}
}
