package gateway

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/faxgate/faxgate/internal/base/redisconn"
	"github.com/faxgate/faxgate/internal/config"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/tokencache"
)

// The status page's data (docs/status-page.md): what the gateway holds right
// now, read from the state its parts already keep. Nothing here is on the
// request path, and nothing here is a secret: no key, token, password or
// private key, and no caller's request data (no path, query, body, header
// value or address of a request).

// reloadState is what the status page shows of the config file: the
// configuration in force and the last reload's outcome. The reloader
// writes it; the admin listener reads it.
type reloadState struct {
	mu       sync.Mutex
	file     string         // "" when the gateway runs without a file
	running  *config.Config // the configuration in force
	at       time.Time      // the last load (start-up or reload)
	result   string         // "ok" or "error"
	trigger  string         // "start", "signal" or "file change"
	problems []string       // of the last failed reload
	restart  []string       // settings that changed and need a restart
}

func (s *reloadState) loaded(cfg *config.Config, at time.Time, trigger string, restart []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running, s.at, s.result, s.trigger, s.problems, s.restart = cfg, at, "ok", trigger, nil, restart
}

func (s *reloadState) failed(at time.Time, trigger string, problems []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at, s.result, s.trigger, s.problems = at, "error", trigger, problems
}

func (s *reloadState) setFile(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.file = path
}

// Status is GET /status.json (docs/status-page.md).
type Status struct {
	Version       string    `json:"version"`
	Revision      string    `json:"revision"`
	Now           time.Time `json:"now"`
	Started       time.Time `json:"started"`
	UptimeSeconds int64     `json:"uptime_seconds"`
	Ready         bool      `json:"ready"`
	ReadyReason   string    `json:"ready_reason,omitempty"`
	// Problems are what needs attention, worst first: the page shows them
	// first, in red.
	Problems []string `json:"problems"`

	Token           TokenStatus       `json:"token"`
	Identity        IdentityStatus    `json:"identity"`
	Callers         []CallerStatus    `json:"callers"`
	SensitiveRoutes []SensitiveStatus `json:"sensitive_routes"`
	Budget          BudgetPageStatus  `json:"budget"`
	Config          ConfigStatus      `json:"config"`
	Redis           RedisStatus       `json:"redis"`
	TLS             TLSStatus         `json:"tls"`
	Egress          EgressStatus      `json:"egress"`
	// Shadow is the shadow candidate in force, absent when none is.
	Shadow *ShadowStatus `json:"shadow,omitempty"`
	// Page is the same data laid out as the page shows it, for the page's
	// own script (statuspage.go); machines read the fields above.
	Page *page `json:"page,omitempty"`
}

// TokenStatus is the upstream token, never its value.
type TokenStatus struct {
	// State is valid, renewing, failing or none.
	State string `json:"state"`
	// Valid: a token that may still be sent is held.
	Valid       bool       `json:"valid"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	SecondsLeft int64      `json:"seconds_left"`
	// Source is upstream (renewed here) or redis (adopted from the store).
	Source      string     `json:"source,omitempty"`
	Store       string     `json:"store"`
	LastRenewal *time.Time `json:"last_renewal,omitempty"`
	LastResult  string     `json:"last_result,omitempty"`
	Unsynced    bool       `json:"unsynced,omitempty"`
}

// IdentityStatus is how callers are told apart (callers section).
type IdentityStatus struct {
	Header         string   `json:"identity_header"`
	TrustedProxies []string `json:"trusted_proxies"`
	Unidentified   string   `json:"unidentified"`
}

// CallerStatus is one caller: its configuration and its last 5 minutes.
type CallerStatus struct {
	Name         string   `json:"name"`
	CIDRs        []string `json:"cidrs"`
	SpiffeIDs    []string `json:"spiffe_ids"`
	HeaderValues []string `json:"header_values"`
	Allow        []string `json:"allow"`
	// Routes are the route names the allow list grants.
	Routes    []string   `json:"routes"`
	RateLimit RateStatus `json:"rate_limit"`
	// RateLimitDefault: the caller has no rate_limit of its own.
	RateLimitDefault bool       `json:"rate_limit_default"`
	Requests5m       uint64     `json:"requests_5m"`
	Denials5m        uint64     `json:"denials_5m"`
	LimitedNow       bool       `json:"limited_now"`
	LastLimited      *time.Time `json:"last_limited,omitempty"`
	Waiting          int        `json:"waiting"`
}

// SensitiveStatus is one route of policy.sensitive and who may call it.
type SensitiveStatus struct {
	Route   string   `json:"route"`
	Confirm bool     `json:"confirm"`
	Granted []string `json:"granted"`
}

// HoldStatus is one route held after an upstream 429.
type HoldStatus struct {
	Route       string `json:"route"`
	SecondsLeft int64  `json:"seconds_left"`
}

// BudgetPageStatus is the upstream budget: GET /budget's windows, the
// holds and the requests waiting.
type BudgetPageStatus struct {
	limit.BudgetStatus
	HonorRetryAfter bool           `json:"honor_retry_after"`
	Holds           []HoldStatus   `json:"holds"`
	Waiting         int            `json:"waiting"`
	WaitingByCaller map[string]int `json:"waiting_by_caller"`
	// MaxWaitSeconds is upstream_budget.max_wait: 0 while requests are
	// refused at once rather than waiting.
	MaxWaitSeconds float64 `json:"max_wait_seconds"`
}

// ConfigStatus is the config file and its last reload.
type ConfigStatus struct {
	File            string    `json:"file"`
	LastReload      time.Time `json:"last_reload"`
	LastResult      string    `json:"last_result"`
	Trigger         string    `json:"trigger"`
	Problems        []string  `json:"problems,omitempty"`
	RestartRequired bool      `json:"restart_required"`
	RestartSettings []string  `json:"restart_settings,omitempty"`
}

// RedisStatus is the Redis connection: its topology as this replica last
// saw it, and its users' state: up, fallback (this replica decides alone)
// or unknown (no decision yet).
type RedisStatus struct {
	Configured bool     `json:"configured"`
	Addrs      []string `json:"addrs,omitempty"`
	// Mode is the topology in use: single, cluster or sentinel.
	Mode       string `json:"mode,omitempty"`
	MasterName string `json:"master_name,omitempty"`
	// Primary is the primary the sentinels name (sentinel); Primaries the
	// nodes that hold a cluster's slots. Both are what the last look of
	// the topology (every 5 s) found.
	Primary   string   `json:"primary,omitempty"`
	Primaries []string `json:"primaries,omitempty"`
	// PrimarySince is when this replica first saw the primaries as they
	// are; PrimaryChanges counts the changes it saw since it started.
	PrimarySince   *time.Time `json:"primary_since,omitempty"`
	PrimaryChanges int64      `json:"primary_changes"`
	// TopologyChecked is the last successful look; TopologyError why the
	// last look failed ("" when it worked).
	TopologyChecked *time.Time `json:"topology_checked,omitempty"`
	TopologyError   string     `json:"topology_error,omitempty"`
	RateLimit       string     `json:"rate_limit,omitempty"`
	Budget          string     `json:"budget,omitempty"`
	TokenStore      string     `json:"token_store,omitempty"`
}

// TLSStatus is the proxy listener's TLS.
type TLSStatus struct {
	Mode         string       `json:"mode"`
	Certificates []CertStatus `json:"certificates"`
}

// CertStatus is one certificate served.
type CertStatus struct {
	Domain      string     `json:"domain"`
	NotAfter    *time.Time `json:"not_after,omitempty"`
	SecondsLeft int64      `json:"seconds_left"`
}

// certWarnBefore is when a certificate's coming expiry becomes a problem:
// the last 3 days, as the FaxgateCertificateExpiring alert's critical.
const certWarnBefore = 72 * time.Hour

// status gathers the page's data.
func (g *Gateway) status(ctx context.Context) *Status {
	now := g.deps.Clock.Now()
	g.reloads.mu.Lock()
	cs := ConfigStatus{File: g.reloads.file, LastReload: g.reloads.at, LastResult: g.reloads.result,
		Trigger: g.reloads.trigger, Problems: g.reloads.problems, RestartSettings: g.reloads.restart}
	cfg := g.reloads.running
	g.reloads.mu.Unlock()
	cs.RestartRequired = len(cs.RestartSettings) > 0

	st := &Status{Version: g.deps.Version, Revision: g.deps.Revision, Now: now.UTC(), Started: g.started.UTC(),
		UptimeSeconds: int64(now.Sub(g.started) / time.Second), Config: cs, Problems: []string{}}
	st.Ready, st.ReadyReason = g.ready()
	rules := g.Handler.Rules()

	// The token.
	ts := g.Tokens.Status()
	st.Token = TokenStatus{State: ts.State, Valid: ts.Valid, Source: ts.Source, Store: g.cfg.Token.Store, LastResult: ts.LastResult,
		Unsynced: ts.Unsynced}
	if !ts.Expiry.IsZero() {
		e := ts.Expiry.UTC()
		st.Token.ExpiresAt, st.Token.SecondsLeft = &e, max(0, int64(ts.Expiry.Sub(now)/time.Second))
	}
	if !ts.LastRenewal.IsZero() {
		l := ts.LastRenewal.UTC()
		st.Token.LastRenewal = &l
	}

	// Callers and sensitive routes, from the configuration in force.
	st.Identity = IdentityStatus{Header: cfg.Callers.IdentityHeader, TrustedProxies: nonNil(cfg.Callers.TrustedProxies),
		Unidentified: cfg.Callers.Unidentified}
	st.Budget.WaitingByCaller = map[string]int{}
	st.Budget.MaxWaitSeconds = rules.Upstream.MaxWait.Seconds()
	if g.Waitlist != nil {
		for c, n := range g.Waitlist.Waiters().Callers {
			if n > 0 {
				st.Budget.WaitingByCaller[c] = n
				st.Budget.Waiting += n
			}
		}
	}
	activity := g.Handler.Activity(now)
	routes := rules.Table.RouteNames()
	for _, c := range cfg.Callers.List {
		a := activity[c.Name]
		cst := CallerStatus{Name: c.Name, CIDRs: nonNil(c.CIDRs), SpiffeIDs: nonNil(c.SpiffeIDs),
			HeaderValues: nonNil(c.HeaderValues), Allow: nonNil(c.Allow), Routes: []string{},
			RateLimit: rateStatus(cfg.RateLimit.Default), RateLimitDefault: c.RateLimit == nil,
			Requests5m: a.Requests, Denials5m: a.Denials, LimitedNow: a.LimitedNow,
			Waiting: st.Budget.WaitingByCaller[c.Name]}
		if c.RateLimit != nil {
			cst.RateLimit = rateStatus(*c.RateLimit)
		}
		if !a.LastLimited.IsZero() {
			l := a.LastLimited.UTC()
			cst.LastLimited = &l
		}
		for _, r := range routes {
			if r != route.RouteAuth && rules.Policy.Decide(c.Name, r).Allowed {
				cst.Routes = append(cst.Routes, r)
			}
		}
		st.Callers = append(st.Callers, cst)
	}
	if st.Callers == nil {
		st.Callers = []CallerStatus{}
	}
	if a := activity[config.UnidentifiedCaller]; a.Requests > 0 || cfg.Callers.Unidentified == "deny" {
		st.Callers = append(st.Callers, CallerStatus{Name: config.UnidentifiedCaller, CIDRs: []string{},
			SpiffeIDs: []string{}, HeaderValues: []string{}, Allow: []string{}, Routes: []string{},
			Requests5m: a.Requests, Denials5m: a.Denials})
	}
	st.SensitiveRoutes = []SensitiveStatus{}
	for _, r := range routes {
		base := rules.Policy.Base(r)
		if !base.Sensitive {
			continue
		}
		s := SensitiveStatus{Route: r, Confirm: base.Confirm, Granted: []string{}}
		for _, c := range cfg.Callers.List {
			if rules.Policy.Decide(c.Name, r).Allowed {
				s.Granted = append(s.Granted, c.Name)
			}
		}
		st.SensitiveRoutes = append(st.SensitiveRoutes, s)
	}

	// The upstream budget: windows, holds, waiting.
	st.Budget.BudgetStatus = limit.BudgetStatus{Backend: "none", Limits: []limit.LimitStatus{}}
	if b := rules.Upstream.Budget; b != nil {
		st.Budget.BudgetStatus = b.Status(ctx)
	}
	st.Budget.HonorRetryAfter = rules.Upstream.HonorRetryAfter
	st.Budget.Holds = []HoldStatus{}
	for r, left := range g.Holds.Standing() {
		st.Budget.Holds = append(st.Budget.Holds, HoldStatus{r, int64((left + time.Second - 1) / time.Second)})
	}
	sort.Slice(st.Budget.Holds, func(i, j int) bool { return st.Budget.Holds[i].Route < st.Budget.Holds[j].Route })

	// Redis and TLS.
	if g.cfg.UsesRedis() {
		st.Redis = redisStatus(g.redisConn.Topology())
		if s, ok := rules.Limiter.(limit.Shared); ok {
			st.Redis.RateLimit = s.SharedState()
		}
		if s, ok := rules.Upstream.Budget.(limit.Shared); ok {
			st.Redis.Budget = s.SharedState()
		}
		if g.cfg.Token.Store == "redis" {
			st.Redis.TokenStore = limit.SharedUp
			if ts.Unsynced {
				st.Redis.TokenStore = limit.SharedFallback
			}
		}
	}
	st.TLS = TLSStatus{Mode: g.cfg.Server.TLS.Mode, Certificates: []CertStatus{}}
	if g.tls != nil {
		for _, c := range g.tls.Certificates() {
			cst := CertStatus{Domain: c.Domain}
			if !c.NotAfter.IsZero() {
				na := c.NotAfter.UTC()
				cst.NotAfter, cst.SecondsLeft = &na, max(0, int64(c.NotAfter.Sub(now)/time.Second))
			}
			st.TLS.Certificates = append(st.TLS.Certificates, cst)
		}
	}
	st.Egress = g.egressStatus(g.cfg.Upstream)
	if diffs := g.Handler.ShadowDifferences(now); diffs != nil {
		st.Shadow = &ShadowStatus{ConfigFile: cfg.Shadow.ConfigFile, Differences: diffs}
	}
	st.Problems = problemsOf(st)
	return st
}

// redisStatus is the topology part of RedisStatus.
func redisStatus(top redisconn.Topology) RedisStatus {
	r := RedisStatus{Configured: true, Addrs: top.Addrs, Mode: top.Mode, MasterName: top.MasterName,
		PrimaryChanges: top.Changes, TopologyError: top.Error}
	switch top.Mode {
	case config.RedisModeSentinel:
		if len(top.Primaries) == 1 {
			r.Primary = top.Primaries[0]
		}
	case config.RedisModeCluster:
		r.Primaries = top.Primaries
	}
	if !top.Since.IsZero() {
		since := top.Since.UTC()
		r.PrimarySince = &since
	}
	if !top.Checked.IsZero() {
		checked := top.Checked.UTC()
		r.TopologyChecked = &checked
	}
	return r
}

// problemsOf lists what needs attention, worst first (docs/status-page.md).
func problemsOf(st *Status) []string {
	var p []string
	if !st.Ready {
		p = append(p, "not ready: "+st.ReadyReason)
	}
	switch {
	case !st.Token.Valid && st.Token.State == tokencache.StateRenewing:
		p = append(p, "no valid upstream token yet: a renewal is in flight, requests wait for it")
	case !st.Token.Valid:
		why := "no valid upstream token: requests get 503 token_unavailable"
		if st.Token.LastResult == "invalid_key" {
			why += " (the upstream rejected the API secret key)"
		}
		p = append(p, why)
	case st.Token.State == tokencache.StateFailing:
		p = append(p, "token renewal failing (last result "+st.Token.LastResult+"); the current token serves until it expires")
	}
	if st.Config.LastResult == "error" {
		msg := "config reload failed; the running configuration stays in force"
		for _, pr := range st.Config.Problems {
			msg += "\n" + pr
		}
		p = append(p, msg)
	}
	if st.Config.RestartRequired {
		p = append(p, "restart required: changed settings not applied ("+joinComma(st.Config.RestartSettings)+")")
	}
	if st.Redis.TopologyError != "" {
		p = append(p, "Redis topology unknown: "+st.Redis.TopologyError)
	}
	for _, u := range []struct{ what, state string }{{"rate limits", st.Redis.RateLimit},
		{"upstream budget", st.Redis.Budget}, {"token store", st.Redis.TokenStore}} {
		if u.state == limit.SharedFallback {
			p = append(p, "Redis in fallback: the "+u.what+" are decided by this replica alone")
		}
	}
	for _, h := range st.Budget.Holds {
		p = append(p, "route "+h.Route+" held after an upstream 429: "+humanSeconds(h.SecondsLeft)+" left")
	}
	for _, c := range st.TLS.Certificates {
		switch {
		case c.NotAfter == nil:
			p = append(p, "no TLS certificate for "+c.Domain)
		case time.Duration(c.SecondsLeft)*time.Second < certWarnBefore:
			p = append(p, "TLS certificate for "+c.Domain+" expires in "+humanSeconds(c.SecondsLeft))
		}
	}
	if p == nil {
		p = []string{}
	}
	return p
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ", "
		}
		out += v
	}
	return out
}

// RateStatus is a caller's rate limit in /status.json, under the names the
// config file and the docs use.
type RateStatus struct {
	RPS   float64 `json:"rps"`
	Burst int     `json:"burst"`
}

func rateStatus(l config.Limit) RateStatus { return RateStatus{RPS: l.RPS, Burst: l.Burst} }
