package mixin

import (
	"fmt"
	"strings"
)

// The dashboard: one row per concern, problems first. Every query selects
// through the cluster, namespace and job variables (a release is a namespace
// and a job), and the caller and route variables where the metric has those
// labels. rate() always takes $__rate_interval; a count over time uses a fixed
// window named in the title (per hour, last 24 h), never one that changes
// meaning with the zoom.

// filter is the matcher every query carries.
const filter = `cluster=~"$cluster",namespace=~"$namespace",job=~"$job"`

// release is the grouping of a per-release figure.
const release = "namespace, job"

// q is metric{extra...,filter}.
func q(metric string, extra ...string) string {
	return metric + "{" + strings.Join(append(extra, filter), ",") + "}"
}

const (
	byCaller = `caller=~"$caller"`
	byRoute  = `route=~"$route"`
)

// layout places panels left to right, 24 units a line, and numbers them.
type layout struct {
	panels []panel
	id     int
	x, y   int
	lineH  int
}

func (l *layout) row(title string) {
	l.newline()
	l.id++
	collapsed := false
	l.panels = append(l.panels, panel{Type: "row", Title: title, ID: l.id, Collapsed: &collapsed,
		GridPos: gridPos{H: 1, W: 24, X: 0, Y: l.y}})
	l.y++
}

func (l *layout) newline() {
	if l.x > 0 {
		l.y += l.lineH
		l.x, l.lineH = 0, 0
	}
}

// add places p, w units wide and h high.
func (l *layout) add(p panel, w, h int) {
	if l.x+w > 24 {
		l.newline()
	}
	l.id++
	p.ID = l.id
	p.GridPos = gridPos{H: h, W: w, X: l.x, Y: l.y}
	dsr := ds()
	p.Datasource = &dsr
	for i := range p.Targets {
		p.Targets[i].Datasource = ds()
		p.Targets[i].RefID = string(rune('A' + i))
	}
	l.panels = append(l.panels, p)
	l.x += w
	l.lineH = max(l.lineH, h)
}

func t(expr, legend string) target { return target{Expr: expr, LegendFormat: legend} }

func f(v float64) *float64 { return &v }

// timeseries is a graph of one unit; lines, when given, are thresholds drawn
// as dashed lines (an alert's threshold).
func timeseries(title, unit, desc string, targets []target, lines ...float64) panel {
	fc := &fieldConfig{Defaults: fieldDefaults{Unit: unit}, Overrides: []any{}}
	if len(lines) > 0 {
		steps := []step{{Color: "green"}}
		for _, v := range lines {
			steps = append(steps, step{Color: "red", Value: f(v)})
		}
		fc.Defaults.Thresholds = &thresholds{Mode: "absolute", Steps: steps}
		fc.Defaults.Custom = map[string]any{"thresholdsStyle": map[string]any{"mode": "dashed"}}
	}
	return panel{Type: "timeseries", Title: title, Description: desc, FieldConfig: fc, Targets: targets,
		Options: map[string]any{"legend": map[string]any{"displayMode": "list", "placement": "bottom"},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"}}}
}

// stat shows the last value; steps colour it (nil for none), noValue is
// shown when the query returns nothing.
func stat(title, unit, desc, noValue string, steps []step, targets ...target) panel {
	fc := &fieldConfig{Defaults: fieldDefaults{Unit: unit, NoValue: noValue}, Overrides: []any{}}
	if steps != nil {
		fc.Defaults.Thresholds = &thresholds{Mode: "absolute", Steps: steps}
	}
	return panel{Type: "stat", Title: title, Description: desc, FieldConfig: fc, Targets: targets,
		Options: map[string]any{
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"colorMode":     "background", "graphMode": "none", "textMode": "value_and_name",
		}}
}

// quantiles are the p50, p90 and p99 of a histogram's buckets.
func quantiles(buckets string, extra ...string) []target {
	var ts []target
	for _, qt := range []float64{0.5, 0.9, 0.99} {
		ts = append(ts, t(fmt.Sprintf("histogram_quantile(%g, sum by (le) (rate(%s[$__rate_interval])))", qt, q(buckets, extra...)),
			fmt.Sprintf("p%g", qt*100)))
	}
	return ts
}

// Dashboard is the Grafana dashboard.
func Dashboard() dashboard {
	var l layout
	rel := release + ", " // a grouping that keeps the release
	relLegend := "{{namespace}}/{{job}}"

	l.row("Health")
	l.add(stat("Ready replicas", "short",
		"Replicas answering 200 on /readyz, per release. FaxgateNoReadyReplica pages when a release has none for 3 minutes.",
		"no replica", []step{{Color: "red"}, {Color: "green", Value: f(1)}},
		t(fmt.Sprintf("sum by (%s) (%s)", release, q("faxgate_ready")), relLegend)), 6, 5)
	l.add(stat("Token expires in", "s",
		fmt.Sprintf("Time left on the freshest token a replica of the release holds (a replica without one does not count). Renewal starts when token.refresh_before remains; FaxgateTokenRenewalOverdue opens a ticket under three quarters of it, FaxgateTokenExpiringSoon pages under half (%d and %d minutes with the default 1 h; the colours are those).", tokenTicketSeconds/60, tokenPageSeconds/60),
		"no valid token", []step{{Color: "red"}, {Color: "orange", Value: f(tokenPageSeconds)}, {Color: "green", Value: f(tokenTicketSeconds)}},
		t(fmt.Sprintf("max by (%s) (%s > 0) - time()", release, q("faxgate_token_expiry_timestamp_seconds")), relLegend)), 6, 5)
	l.add(stat("Requests answered 5xx", "percentunit",
		fmt.Sprintf("Share of the release's requests answered 5xx. FaxgateUpstreamFailing pages above %g%% (with at least %d requests in 5 minutes).", upstreamFailingRatio*100, minRequests),
		"no traffic", []step{{Color: "green"}, {Color: "orange", Value: f(upstreamErrorRatio)}, {Color: "red", Value: f(upstreamFailingRatio)}},
		t(fmt.Sprintf("sum by (%[1]s) (rate(%[2]s[$__rate_interval])) / sum by (%[1]s) (rate(%[3]s[$__rate_interval]))", release, q("faxgate_requests_total", `code=~"5.."`), q("faxgate_requests_total")), relLegend)), 6, 5)
	l.add(stat("Configuration", "bool",
		"1 while every replica's last configuration load succeeded (min over replicas); 0 while a failed reload is the latest on some replica (FaxgateConfigReloadFailing).",
		"", []step{{Color: "red"}, {Color: "green", Value: f(1)}},
		t(fmt.Sprintf("min by (%s) (%s)", release, q("faxgate_config_last_reload_successful")), relLegend)), 6, 5)

	l.row("Replicas")
	l.add(timeseries("Scrape up, per pod", "bool",
		"1 while Prometheus scrapes the pod's admin port, 0 while the scrape fails; a pod gone from discovery leaves no line. FaxgateDown pages when some but most of a release's targets are down, FaxgateAbsent when none is up.",
		[]target{t(fmt.Sprintf("max by (%spod) (%s)", rel, q("up")), "{{pod}}")}), 8, 8)
	l.add(timeseries("Memory per pod", "bytes",
		"Resident memory of each faxgate process (process_resident_memory_bytes), beside the container's memory limit in the chart's resources. Bodies held for a 401 resend are bounded by server.resend_buffer_bytes.",
		[]target{t(fmt.Sprintf("max by (%spod) (%s)", rel, q("process_resident_memory_bytes")), "{{pod}}")}), 8, 8)
	l.add(timeseries("CPU per pod", "short",
		"CPU seconds each faxgate process used per second (1 is one core busy), from process_cpu_seconds_total.",
		[]target{t(fmt.Sprintf("sum by (%spod) (rate(%s[$__rate_interval]))", rel, q("process_cpu_seconds_total")), "{{pod}}")}), 8, 8)

	l.row("Traffic")
	l.add(timeseries("Requests by caller", "reqps", "Requests per second through the gateway, by caller (unidentified: no identity matched).",
		[]target{t(fmt.Sprintf("sum by (caller) (rate(%s[$__rate_interval]))", q("faxgate_requests_total", byCaller, byRoute)), "{{caller}}")}), 8, 8)
	l.add(timeseries("Requests by route", "reqps", "Requests per second, by route (unmatched: an /v1/ path no route names; none: an invalid path).",
		[]target{t(fmt.Sprintf("sum by (route) (rate(%s[$__rate_interval]))", q("faxgate_requests_total", byCaller, byRoute)), "{{route}}")}), 8, 8)
	l.add(timeseries("Responses other than 2xx, by code", "reqps", "Answers per second with a status other than 2xx, by code (499: the caller left first). The gateway's own refusals carry an error code in the body; faxgate_denied_total counts them by reason.",
		[]target{t(fmt.Sprintf("sum by (code) (rate(%s[$__rate_interval]))", q("faxgate_requests_total", byCaller, byRoute, `code!~"2.."`)), "{{code}}")}), 8, 8)
	l.add(timeseries("Share answered 5xx, by route", "percentunit",
		fmt.Sprintf("Share of each route's requests answered 5xx. FaxgateUpstreamErrors opens a ticket above %g%% for 10 minutes (with at least %d requests in 5 minutes).", upstreamErrorRatio*100, minRequests),
		[]target{t(fmt.Sprintf("sum by (%[1]sroute) (rate(%[2]s[$__rate_interval])) / sum by (%[1]sroute) (rate(%[3]s[$__rate_interval]))", rel, q("faxgate_requests_total", byRoute, `code=~"5.."`), q("faxgate_requests_total", byRoute)), "{{route}} "+relLegend)},
		upstreamErrorRatio), 12, 8)
	l.add(timeseries("Requests in flight", "short", "Requests the gateway is handling right now, per replica.",
		[]target{t(fmt.Sprintf("sum by (%spod) (%s)", rel, q("faxgate_inflight_requests")), "{{pod}}")}), 12, 8)

	l.row("Denials and rate limits")
	l.add(timeseries("Denied by reason", "reqps", "Requests the gateway refused per second, by reason (the error code callers see).",
		[]target{t(fmt.Sprintf("sum by (reason) (rate(%s[$__rate_interval]))", q("faxgate_denied_total", byCaller, byRoute)), "{{reason}}")}), 8, 8)
	l.add(timeseries("Share rate limited, by caller", "percentunit",
		fmt.Sprintf("Share of each caller's requests refused 429 rate_limited. FaxgateCallerRateLimited (info) fires above %g%% for 15 minutes.", rateLimitedRatio*100),
		[]target{t(fmt.Sprintf("sum by (caller) (rate(%s[$__rate_interval])) / sum by (caller) (rate(%s[$__rate_interval]))", q("faxgate_rate_limited_total", byCaller), q("faxgate_requests_total", byCaller)), "{{caller}}")},
		rateLimitedRatio), 8, 8)
	l.add(stat("numbers.delete denied, last 24 h", "short",
		"Attempts to delete a phone number that policy refused in the last 24 hours, by caller and reason; FaxgateSensitiveRouteDenied (info) fires on each. The audit log has every attempt.",
		"0", []step{{Color: "green"}, {Color: "orange", Value: f(1)}},
		t(fmt.Sprintf("sum by (caller, reason) (increase(%s[24h]))", q("faxgate_denied_total", `route="numbers.delete"`, byCaller)), "{{caller}} {{reason}}")), 8, 8)

	l.row("Latency")
	l.add(timeseries("Gateway latency", "s", "Whole-request time in the gateway (first byte in to last byte out), quantiles over the selected callers and routes.",
		quantiles("faxgate_request_duration_seconds_bucket", byCaller, byRoute)), 8, 8)
	l.add(timeseries("Upstream latency, uploads aside", "s",
		fmt.Sprintf("Time to the upstream's response headers, routes other than uploads (%s). FaxgateUpstreamSlow opens a ticket when the p99 stays above %d s for 15 minutes.", strings.ReplaceAll(uploadRoutes, "|", ", "), upstreamSlowSeconds),
		quantiles("faxgate_upstream_duration_seconds_bucket", byRoute, fmt.Sprintf(`route!~"%s"`, uploadRoutes)), upstreamSlowSeconds), 8, 8)
	l.add(timeseries("Upstream latency of uploads", "s", "Time to the upstream's response headers on the upload routes, whose requests carry documents and take seconds to minutes; no alert watches it.",
		quantiles("faxgate_upstream_duration_seconds_bucket", byRoute, fmt.Sprintf(`route=~"%s"`, uploadRoutes))), 8, 8)

	l.row("Token")
	l.add(timeseries("Token renewals per hour", "short", "Renewals of the upstream token in the hour up to each point, by result (invalid_key: the API key was rejected, FaxgateAPIKeyRejected pages).",
		[]target{t(fmt.Sprintf("sum by (result) (increase(%s[1h]))", q("faxgate_token_refresh_total")), "{{result}}")}), 8, 8)
	l.add(timeseries("Tokens adopted per hour", "short", "Tokens a replica started using in the hour up to each point: renewed itself (upstream) or read from the shared store (redis).",
		[]target{t(fmt.Sprintf("sum by (source) (increase(%s[1h]))", q("faxgate_token_adopted_total")), "{{source}}")}), 8, 8)
	l.add(timeseries("401 resends by route", "reqps",
		fmt.Sprintf("Requests resent after an upstream 401, per second. FaxgateUpstream401Resends opens a ticket above %d in 15 minutes.", resendsPer15m),
		[]target{t(fmt.Sprintf("sum by (route) (rate(%s[$__rate_interval]))", q("faxgate_upstream_401_retries_total", byRoute)), "{{route}}")}), 8, 8)

	l.row("Upstream budget")
	l.add(timeseries("Budget used, by limit and route", "percentunit",
		fmt.Sprintf("Each upstream_budget window's use as of its last decision; route is empty for tenant limits. FaxgateUpstreamBudgetNearlySpent opens a ticket above %g%% for 15 minutes while decisions keep coming.", budgetUsedRatio*100),
		[]target{t(fmt.Sprintf("max by (limit, route) (%s)", q("faxgate_upstream_budget_used_ratio")), "{{limit}} {{route}}")},
		budgetUsedRatio), 8, 8)
	l.add(timeseries("Budget spent, by caller and limit", "reqps",
		"Requests per second each caller sends upstream under each upstream_budget limit (admitted and counted against it): who spends the vendor's budget. GET /budget on the admin port shows each window's use by caller right now.",
		[]target{t(fmt.Sprintf("sum by (caller, limit) (rate(%s[$__rate_interval]))", q("faxgate_upstream_budget_spent_total", byCaller)), "{{caller}} {{limit}}")}), 8, 8)
	l.add(timeseries("Budget refusals, by caller and limit", "reqps", "Requests refused 429 upstream_budget_exhausted per second: the caller was beyond its share (FaxgateCallerOverBudgetShare, info).",
		[]target{t(fmt.Sprintf("sum by (caller, limit) (rate(%s[$__rate_interval]))", q("faxgate_upstream_budget_refused_total", byCaller)), "{{caller}} {{limit}}")}), 8, 8)
	l.add(timeseries("Vendor 429s by route", "reqps",
		fmt.Sprintf("429 answers from the vendor per second. FaxgateUpstreamThrottled opens a ticket above %d in 15 minutes.", throttledPer15m),
		[]target{t(fmt.Sprintf("sum by (route) (rate(%s[$__rate_interval]))", q("faxgate_upstream_throttled_total", byRoute)), "{{route}}")}), 8, 8)
	l.add(timeseries("Hold left, by route", "s",
		fmt.Sprintf("Time left on the Retry-After hold of a route (the vendor's 429); FaxgateUpstreamThrottled also fires on a hold above %d s.", holdSeconds),
		[]target{t(fmt.Sprintf("max by (route) (%s)", q("faxgate_upstream_hold_seconds", byRoute)), "{{route}}")}, holdSeconds), 8, 8)
	l.add(timeseries("Vendor X-RateLimit-Remaining", "short", "The vendor's last X-RateLimit-Remaining, by route (the lowest over replicas).",
		[]target{t(fmt.Sprintf("min by (route) (%s)", q("faxgate_upstream_ratelimit_remaining", byRoute)), "{{route}}")}), 8, 8)
	l.add(timeseries("Requests waiting for the budget", "short",
		"Requests waiting now for a Retry-After hold's end or a budget slot instead of being refused (upstream_budget.max_wait), by pod; at most upstream_budget.max_waiting each.",
		[]target{t(fmt.Sprintf("sum by (pod) (%s)", q("faxgate_upstream_budget_waiting")), "{{pod}}")}), 8, 8)
	l.add(timeseries("Budget wait, p90 by caller", "s",
		fmt.Sprintf("How long admitted requests waited for the upstream budget (90th percentile), beside upstream_budget.max_wait. FaxgateUpstreamBudgetWaitsNearMax opens a ticket when the p90 stays over %g%% of max_wait for 15 minutes.", waitNearMax*100),
		[]target{
			t(fmt.Sprintf("histogram_quantile(0.9, sum by (caller, le) (rate(%s[$__rate_interval])))", q("faxgate_upstream_budget_wait_seconds_bucket", byCaller)), "{{caller}}"),
			t(fmt.Sprintf("max(%s)", q("faxgate_upstream_budget_max_wait_seconds")), "max_wait"),
		}), 8, 8)
	l.add(timeseries("Budget decided locally", "ops", "Budget decisions per second made on a replica alone (requests / replicas_hint) because Redis was unreachable (FaxgateUpstreamBudgetLocal).",
		[]target{t(fmt.Sprintf("sum by (pod) (rate(%s[$__rate_interval]))", q("faxgate_upstream_budget_fallback_total")), "{{pod}}")}), 8, 8)

	l.row("Way to the vendor")
	l.add(timeseries("Resends by reason", "reqps",
		"Requests sent upstream again per second, by reason: unsent (the upstream certainly never received it: the connection, its TLS handshake or the egress proxy failed; upstream.retry_unsent), reset (a bodiless GET whose connection broke off, once), throttled (a vendor 429 waited out, upstream_budget.retry_throttled). Resends after a 401 are in the Token row.",
		[]target{t(fmt.Sprintf("sum by (reason) (rate(%s[$__rate_interval]))", q("faxgate_upstream_retries_total", byRoute)), "{{reason}}")}), 12, 8)
	l.add(timeseries("Egress proxy failures by reason", "ops",
		"Failures of the egress proxy (upstream.proxy_url) per second, requests and token renewals alike, by reason: unreachable (no connection to the proxy), auth (it refused the credentials of upstream.proxy_auth_file: 407), refused (another refusal: 403, 5xx). No line without a proxy. FaxgateUpstreamProxyFailing opens a ticket when failures of one reason keep coming for 5 minutes.",
		[]target{t(fmt.Sprintf("sum by (reason) (rate(%s[$__rate_interval]))", q("faxgate_upstream_proxy_errors_total")), "{{reason}}")}), 12, 8)

	l.row("Redis")
	l.add(timeseries("Token store errors by op", "ops", "Redis errors of the shared token store per second, by operation (FaxgateTokenStoreErrors).",
		[]target{t(fmt.Sprintf("sum by (op) (rate(%s[$__rate_interval]))", q("faxgate_token_store_errors_total")), "{{op}}")}), 8, 8)
	l.add(timeseries("Rate limits decided locally", "ops", "Rate limit decisions per second made on a replica alone while Redis was unreachable, by caller (FaxgateRateLimitFallback).",
		[]target{t(fmt.Sprintf("sum by (caller) (rate(%s[$__rate_interval]))", q("faxgate_rate_limit_fallback_total", byCaller)), "{{caller}}")}), 8, 8)
	l.add(stat("Replicas limiting locally", "short", "Replicas whose rate limiter cannot reach Redis right now (rate_limit.backend: redis only).",
		"0", []step{{Color: "green"}, {Color: "orange", Value: f(1)}},
		t(fmt.Sprintf("count by (%s) (%s == 0)", release, q("faxgate_rate_limit_backend_up")), relLegend)), 8, 8)
	l.add(timeseries("Redis primary changes per hour", "short", "Changes of the Redis primary in the hour up to each point, as the replica that saw the most counts them: a Sentinel failover, or a cluster slot range moved to another primary (docs/deployment.md, Redis in production).",
		[]target{t(fmt.Sprintf("max(increase(%s[1h]))", q("faxgate_redis_primary_changes_total")), "primary changes")}), 8, 8)

	l.row("Configuration and process")
	l.add(timeseries("Config reloads per hour", "short", "Configuration loads in the hour up to each point, by result (FaxgateConfigReloadFailing fires on an error).",
		[]target{t(fmt.Sprintf("sum by (result) (increase(%s[1h]))", q("faxgate_config_reload_total")), "{{result}}")}), 8, 8)
	l.add(stat("Replicas needing a restart", "short", "Replicas whose configuration file holds changes only a restart applies (FaxgateConfigRestartRequired after an hour).",
		"0", []step{{Color: "green"}, {Color: "orange", Value: f(1)}},
		t(fmt.Sprintf("sum by (%s) (%s)", release, q("faxgate_config_restart_required")), relLegend)), 8, 8)
	l.add(timeseries("Background loop panics per hour", "short", "Panics recovered in background loops in the hour up to each point, by loop (FaxgateBackgroundLoopPanicked); the log has the stack.",
		[]target{t(fmt.Sprintf("sum by (loop) (increase(%s[1h]))", q("faxgate_background_panics_total")), "{{loop}}")}), 8, 8)

	l.row("Candidate vs live")
	decisions := q("faxgate_shadow_decisions_total", byCaller, byRoute)
	l.add(timeseries("Candidate agreement", "percentunit",
		"Share of the requests the shadow candidate (shadow.config_file) decided as the live configuration did, per release. No line without a candidate. Below 100%, the panels beside it show who and what it would decide otherwise; none of it was enforced.",
		// 0, not no line, when no decision agrees.
		[]target{t(fmt.Sprintf("(sum by (%[1]s) (rate(%[2]s[$__rate_interval]) and %[3]s) or 0 * sum by (%[1]s) (rate(%[2]s[$__rate_interval])))\n  / sum by (%[1]s) (rate(%[2]s[$__rate_interval]))",
			release, decisions, sameOutcome(decisions)), relLegend)}), 6, 8)
	l.add(timeseries("Differences by caller", "reqps",
		"Requests per second the candidate would decide otherwise than the live configuration, by caller (as the live configuration names it). The status page lists each caller's differences of the last 5 minutes.",
		[]target{t(fmt.Sprintf("sum by (caller) (rate(%s[$__rate_interval]) unless %s)", decisions, sameOutcome(decisions)), "{{caller}}")}), 6, 8)
	l.add(timeseries("Differences by route", "reqps",
		"Requests per second the candidate would decide otherwise than the live configuration, by route.",
		[]target{t(fmt.Sprintf("sum by (route) (rate(%s[$__rate_interval]) unless %s)", decisions, sameOutcome(decisions)), "{{route}}")}), 6, 8)
	l.add(timeseries("Differences by outcome", "reqps",
		"Requests per second the candidate would decide otherwise, by the live outcome and the candidate's (allowed, or the error code a caller would get: forbidden, rate_limited, upstream_budget_exhausted ...).",
		[]target{t(fmt.Sprintf("sum by (live, candidate) (rate(%s[$__rate_interval]) unless %s)", decisions, sameOutcome(decisions)), "{{live}} → {{candidate}}")}), 6, 8)

	l.row("TLS")
	l.add(stat("Certificate expires in", "s",
		fmt.Sprintf("Time left on the proxy listener's certificate, by domain. FaxgateCertificateExpiringSoon opens a ticket under %d days, FaxgateCertificateExpiryCritical pages under %d, unless a release sets their thresholds.", certTicketDays, certPageDays),
		"no TLS", []step{{Color: "red"}, {Color: "orange", Value: f(certPageDays * 86400)}, {Color: "green", Value: f(certTicketDays * 86400)}},
		t(fmt.Sprintf("min by (domain) (%s) - time()", q("faxgate_tls_certificate_expiry_timestamp_seconds")), "{{domain}}")), 8, 8)
	l.add(timeseries("Handshake errors by reason", "ops", "TLS handshakes that failed per second, by reason (no_client_cert, bad_client_cert: a caller without a valid client certificate).",
		[]target{t(fmt.Sprintf("sum by (reason) (rate(%s[$__rate_interval]))", q("faxgate_tls_handshake_errors_total")), "{{reason}}")}), 8, 8)
	l.add(timeseries("ACME failures per hour", "short", "Failed certificate orders and renewals in the hour up to each point (tls.mode: acme; certmagic retries with backoff).",
		[]target{t(fmt.Sprintf("sum by (domain, op) (increase(%s[1h]))", q("faxgate_tls_acme_failures_total")), "{{domain}} {{op}}")}), 8, 8)

	d := dashboard{
		UID:          "faxgate",
		Title:        "faxgate",
		Description:  "faxgate, per release (namespace and job): health, replicas, traffic, denials, latency, token, upstream budget, the way to the vendor, Redis, configuration, a shadow candidate against the live configuration, and TLS. Generated by cmd/faxgate-mixin (docs/metrics-and-alerts.md).",
		Tags:         []string{"faxgate"},
		Timezone:     "utc",
		Editable:     true,
		GraphTooltip: 1,
		Schema:       39,
		Version:      1,
		Refresh:      "30s",
		Time:         timeRange{From: "now-6h", To: "now"},
		Links:        []link{{Title: "Runbook", Type: "link", URL: DefaultRunbookBaseURL, TargetBlank: true}},
		Panels:       l.panels,
	}
	d.Annotations.List = []any{}
	d.Templating.List = variables()
	return d
}

// sameOutcome is the right-hand side of an and (or an unless) that keeps
// (or drops) the series of decisions where the candidate's outcome is the
// live one: every (caller, route, candidate) of decisions with live set to
// candidate. PromQL cannot compare two labels of one series; this matches
// them instead, whatever the outcomes are called. label_join, not
// label_replace, so that no "$1" reaches Grafana's variable syntax.
func sameOutcome(decisions string) string {
	const on = "cluster, namespace, job, caller, route, live, candidate"
	return fmt.Sprintf(`on (%s) label_join(group by (cluster, namespace, job, caller, route, candidate) (%s), "live", "", "candidate")`, on, decisions)
}

// variables are the dashboard's template variables: the data source, then
// each label that narrows the view, each one's values limited by the ones
// before it.
func variables() []variable {
	dsv := variable{Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus",
		Current: map[string]any{}, Refresh: 1}
	query := func(name, label, metric, allValue, desc string) variable {
		d := ds()
		def := fmt.Sprintf("label_values(%s, %s)", metric, name)
		return variable{Name: name, Label: label, Description: desc, Type: "query", Datasource: &d,
			Query: variableQuery{Query: def, RefID: "PrometheusVariableQueryEditor-VariableQuery"}, Definition: def,
			Refresh: 2, IncludeAll: true, Multi: true, AllValue: allValue, Sort: 1,
			Current: map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}}
	}
	return []variable{
		dsv,
		// cluster and namespace may be absent (one cluster, no Kubernetes):
		// All is .*, which matches a missing label too.
		query("cluster", "Cluster", "faxgate_build_info", ".*", "The cluster label, when Prometheus adds one."),
		query("namespace", "Namespace", `faxgate_build_info{cluster=~"$cluster"}`, ".*", "The release's namespace."),
		query("job", "Job", `faxgate_build_info{cluster=~"$cluster",namespace=~"$namespace"}`, ".+", "The release's scrape job (the Helm chart's <fullname>)."),
		query("caller", "Caller", `faxgate_requests_total{`+filter+`}`, ".*", "A caller configured in callers.list, or unidentified."),
		query("route", "Route", `faxgate_requests_total{`+filter+`}`, ".*", "A route name."),
	}
}
