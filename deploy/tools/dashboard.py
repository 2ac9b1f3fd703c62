#!/usr/bin/env python3
"""Writes deploy/grafana/faxgate.json. The dashboard is code so that its grid,
ids and queries stay consistent; edit this file, run it (python3, no packages),
and commit both. deploy/test checks every query against faxgate's metrics."""
import json, os

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'caller=~"$caller",route=~"$route"'
panels, pid, y = [], 0, 0


def row(title):
    global pid, y
    pid += 1
    panels.append({"type": "row", "title": title, "id": pid, "collapsed": False,
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
    y += 1


def panel(title, targets, unit="short", kind="timeseries", w=8, h=8, x=None, desc="", **extra):
    global pid, y
    pid += 1
    used = sum(p["gridPos"]["w"] for p in panels if p["gridPos"]["y"] == y and p["type"] != "row")
    if x is None:
        x = used
    if x + w > 24:
        y += h
        x = 0
    p = {"type": kind, "title": title, "id": pid, "datasource": DS, "description": desc,
         "gridPos": {"h": h, "w": w, "x": x, "y": y},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "options": {}, "targets": []}
    for i, (expr, legend) in enumerate(targets):
        p["targets"].append({"datasource": DS, "expr": expr, "legendFormat": legend,
                             "refId": chr(ord("A") + i)})
    p.update(extra)
    panels.append(p)
    if x + w >= 24:
        y += h


def endrow():
    global y
    if any(p["gridPos"]["y"] == y and p["type"] != "row" for p in panels):
        y += 8


row("Traffic")
panel("Requests by caller", [(f'sum by (caller) (rate(faxgate_requests_total{{{SEL}}}[$__rate_interval]))', "{{caller}}")], "reqps")
panel("Requests by route", [(f'sum by (route) (rate(faxgate_requests_total{{{SEL}}}[$__rate_interval]))', "{{route}}")], "reqps")
panel("Responses other than 2xx, by code", [(f'sum by (code) (rate(faxgate_requests_total{{{SEL},code!~"2.."}}[$__rate_interval]))', "{{code}}")], "reqps")
endrow()
row("Denials and rate limits")
panel("Denied by reason", [(f'sum by (reason) (rate(faxgate_denied_total{{{SEL}}}[$__rate_interval]))', "{{reason}}")], "reqps")
panel("Rate-limited callers", [('sum by (caller) (rate(faxgate_rate_limited_total{caller=~"$caller"}[$__rate_interval]))', "{{caller}}")], "reqps")
panel("numbers.delete attempts denied", [('sum by (caller, reason) (increase(faxgate_denied_total{route="numbers.delete"}[$__range]))', "{{caller}} {{reason}}")], "short", kind="stat",
      desc="Every attempt is also in the audit log (msg audit).")
endrow()
row("Latency")
panel("Gateway latency (whole request)", [(f'histogram_quantile({q}, sum by (le) (rate(faxgate_request_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))', f"p{int(float(q)*100)}") for q in ("0.5", "0.9", "0.99")], "s", w=12)
panel("Upstream latency (to response headers)", [(f'histogram_quantile({q}, sum by (le) (rate(faxgate_upstream_duration_seconds_bucket{{route=~"$route"}}[$__rate_interval])))', f"p{int(float(q)*100)}") for q in ("0.5", "0.9", "0.99")], "s", w=12)
row("Token")
panel("Token expires in", [("min(faxgate_token_expiry_timestamp_seconds) - time()", "least time left")], "s", kind="stat", w=6,
      desc="Renewal starts when token.refresh_before remains; FaxgateTokenRenewalOverdue fires under 30 minutes.",
      fieldConfig={"defaults": {"unit": "s", "thresholds": {"mode": "absolute", "steps": [
          {"color": "red", "value": None}, {"color": "orange", "value": 900}, {"color": "green", "value": 1800}]}}, "overrides": []})
panel("Ready replicas", [("sum(faxgate_ready)", "ready"), ("count(faxgate_ready)", "running")], "short", w=6)
panel("Token renewals by result", [("sum by (result) (increase(faxgate_token_refresh_total[$__rate_interval]))", "{{result}}")], "short", w=6)
panel("401 resends by route", [('sum by (route) (rate(faxgate_upstream_401_retries_total{route=~"$route"}[$__rate_interval]))', "{{route}}")], "reqps", w=6)
row("Upstream budget")
panel("Budget used, by limit and route", [("max by (limit, route) (faxgate_upstream_budget_used_ratio)", "{{limit}} {{route}}")], "percentunit",
      desc="Each upstream_budget window's use as of its last decision; route is empty for tenant limits.")
panel("Budget refusals, by caller and limit", [('sum by (caller, limit) (rate(faxgate_upstream_budget_refused_total{caller=~"$caller"}[$__rate_interval]))', "{{caller}} {{limit}}")], "reqps")
panel("Vendor 429s and holds", [('sum by (route) (rate(faxgate_upstream_throttled_total{route=~"$route"}[$__rate_interval]))', "429s {{route}}"),
                                 ('max by (route) (faxgate_upstream_hold_seconds{route=~"$route"})', "hold left (s) {{route}}")], "short")
panel("Vendor X-RateLimit-Remaining", [('min by (route) (faxgate_upstream_ratelimit_remaining{route=~"$route"})', "{{route}}")], "short", w=12)
panel("Budget decided locally (Redis unreachable)", [("sum(rate(faxgate_upstream_budget_fallback_total[$__rate_interval]))", "fallbacks")], "ops", w=12)
row("Redis")
panel("Token store errors by op", [("sum by (op) (rate(faxgate_token_store_errors_total[$__rate_interval]))", "{{op}}")], "ops")
panel("Rate limit decisions made locally (fallback)", [('sum by (caller) (rate(faxgate_rate_limit_fallback_total{caller=~"$caller"}[$__rate_interval]))', "{{caller}}"),
                                                        ("min(faxgate_rate_limit_backend_up)", "backend up (min)")], "short")
panel("Token adoptions and leases", [("sum by (source) (increase(faxgate_token_adopted_total[$__rate_interval]))", "adopted from {{source}}"),
                                     ("sum by (result) (increase(faxgate_token_lease_total[$__rate_interval]))", "lease {{result}}"),
                                     ("max(faxgate_token_store_unsynced)", "unsynced")], "short")
row("Configuration")
panel("Config reloads by result", [("sum by (result) (increase(faxgate_config_reload_total[$__rate_interval]))", "{{result}}")], "short")
panel("Last reload successful", [("min(faxgate_config_last_reload_successful)", "all replicas")], "bool", kind="stat")
panel("Restart required", [("max(faxgate_config_restart_required)", "any replica")], "bool", kind="stat")
row("TLS")
panel("Certificate expires in", [("min by (domain) (faxgate_tls_certificate_expiry_timestamp_seconds) - time()", "{{domain}}")], "s", kind="stat")
panel("Handshake errors by reason", [("sum by (reason) (rate(faxgate_tls_handshake_errors_total[$__rate_interval]))", "{{reason}}")], "ops")
panel("ACME failures", [("sum by (domain, op) (increase(faxgate_tls_acme_failures_total[$__rate_interval]))", "{{domain}} {{op}}")], "short")


def var(name, label):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": f"label_values(faxgate_requests_total, {name})", "refId": "vars"},
            "definition": f"label_values(faxgate_requests_total, {name})",
            "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1}


dash = {
    "uid": "faxgate", "title": "faxgate", "description": "faxgate: traffic, denials, latency, token, upstream budget, Redis, config and TLS (docs/metrics-and-alerts.md).",
    "tags": ["faxgate"], "timezone": "utc", "editable": True, "graphTooltip": 1,
    "schemaVersion": 39, "version": 1, "refresh": "30s",
    "time": {"from": "now-6h", "to": "now"},
    "templating": {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1},
        var("caller", "Caller"), var("route", "Route")]},
    "annotations": {"list": []}, "links": [], "panels": panels,
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "grafana", "faxgate.json")
with open(out, "w") as f:
    json.dump(dash, f, indent=2)
    f.write("\n")
