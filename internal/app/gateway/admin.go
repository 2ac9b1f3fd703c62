package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/faxgate/faxgate/internal/base/httpjson"
	"github.com/faxgate/faxgate/policy/limit"
)

// adminHandler serves /metrics, /healthz, /readyz, /budget, the status page
// (/, /status and /status.json: docs/status-page.md) and, when enabled,
// /debug/pprof/ (docs/metrics-and-alerts.md). It is never mounted on the
// proxy listener.
func adminHandler(reg *prometheus.Registry, withPprof bool, ready func() (bool, string), budget func(context.Context) any,
	statusPage, statusJSON http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", statusPage)
	mux.HandleFunc("GET /status", statusPage)
	mux.HandleFunc("GET /status.json", statusJSON)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := ready(); !ok {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": why})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ready": true})
	})
	mux.HandleFunc("GET /budget", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, budget(r.Context()))
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// hostGuard answers only requests whose Host is an IP address (with or
// without a port), "localhost", or one of allowed (compared without regard
// to case); any other gets 421 and nothing else. A web page can rebind its
// own DNS name to a pod's address, and an operator's browser with
// `kubectl port-forward` open would then read /status.json for it; such a
// page's requests carry its own name as Host (docs/security.md#the-admin-listener-answers-only-its-own-names).
func hostGuard(next http.Handler, allowed []string) http.Handler {
	names := make(map[string]bool, len(allowed)+1)
	names["localhost"] = true
	for _, h := range allowed {
		names[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !adminHostAllowed(r.Host, names) {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminHostAllowed reports whether host (a Host header) names the admin
// listener: an IP literal, or a name in names (lower case, no final dot).
func adminHostAllowed(host string, names map[string]bool) bool {
	h := host
	if sh, _, err := net.SplitHostPort(host); err == nil {
		h = sh
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		h = host[1 : len(host)-1]
	}
	if h == "" {
		return false
	}
	if a, err := netip.ParseAddr(h); err == nil {
		// A zone ("fe80::1%eth0") is the client's business; the address
		// is still a literal no DNS name can stand in for.
		return a.IsValid()
	}
	return names[strings.ToLower(strings.TrimSuffix(h, "."))]
}

// writeJSON answers with v; admin answers describe the moment and are never
// cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	httpjson.Write(w, status, v)
}

// holdStatus is one standing Retry-After hold in GET /budget.
type holdStatus struct {
	Route             string `json:"route"`
	RetryAfterSeconds int64  `json:"retry_after_seconds"`
}

// budgetStatus is GET /budget (docs/metrics-and-alerts.md): every
// upstream_budget limit's windows per caller (used, reserved, remaining),
// the standing Retry-After holds, and the requests waiting on this replica
// (docs/upstream-budget.md#waiting-instead-of-refusing).
func (g *Gateway) budgetStatus(ctx context.Context) any {
	st := limit.BudgetStatus{Backend: "none", Limits: []limit.LimitStatus{}}
	if b := g.Handler.Rules().Upstream.Budget; b != nil {
		st = b.Status(ctx)
	}
	holds := []holdStatus{}
	for route, left := range g.Holds.Standing() {
		holds = append(holds, holdStatus{route, int64((left + time.Second - 1) / time.Second)})
	}
	sort.Slice(holds, func(i, j int) bool { return holds[i].Route < holds[j].Route })
	return struct {
		limit.BudgetStatus
		Holds   []holdStatus        `json:"holds"`
		Waiting limit.WaitersStatus `json:"waiting"`
	}{st, holds, g.Waitlist.Waiters()}
}
