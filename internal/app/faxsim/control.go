package faxsim

import (
	"encoding/json"
	"maps"
	"net/http"
	"time"

	"github.com/faxgate/faxgate/internal/base/httpjson"
)

// AuthCalls returns how many POST /v1/auth requests arrived, valid or not:
// the number a token cache is judged by.
func (s *Sim) AuthCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authCalls
}

// RouteCounts returns requests per "METHOD /path-template", for example
// "POST /v1/numbers/delete" or "GET /v1/esign_templates/{templateId}/field_rule".
// A request whose raw path matches no template counts as "METHOD other".
func (s *Sim) RouteCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.routes)
}

// Throttled returns how many requests the vendor's limits (EndpointLimit,
// TenantLimit) refused with 429.
func (s *Sim) Throttled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.throttled
}

// SetLatency delays every later non-/_sim/ response by d; a request whose
// context ends meanwhile gets no response at all. Zero removes the delay.
func (s *Sim) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = max(d, 0)
}

// FailNext makes the next n non-/_sim/ requests, the token endpoint included,
// fail with the given HTTP status and {"status":0,"message":"simulated
// failure"}. It replaces any failures still pending; n <= 0 cancels them. A
// status outside 200-599 cannot end a response and becomes 500.
func (s *Sim) FailNext(n int, status int) {
	if status < 200 || status > 599 {
		status = http.StatusInternalServerError
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLeft, s.failStatus, s.failRetry = max(n, 0), status, 0
}

// ThrottleNext makes the next n non-/_sim/ requests fail as the vendor's
// 429 does, with Retry-After: retryAfter (whole seconds, rounded up; none
// when 0). It replaces any failures still pending, as FailNext does.
func (s *Sim) ThrottleNext(n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLeft, s.failStatus, s.failRetry = max(n, 0), http.StatusTooManyRequests, max(retryAfter, 0)
}

// Reset clears counts, recorded requests, rate-limit windows and injected
// latency and failures, so one Sim can serve several subtests. Data and
// issued tokens are kept: resetting observation must not log anyone out.
func (s *Sim) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authCalls = 0
	s.tokenStats = TokenStats{}
	for _, rec := range s.issued {
		rec.presented = false
	}
	clear(s.routes)
	s.ring.reset()
	clear(s.rate)
	clear(s.endpointCount)
	s.tenantCount, s.throttled = vendorCount{}, 0
	s.latency = 0
	s.failLeft, s.failStatus, s.failRetry = 0, 0, 0
}

// recordedJSON is how /_sim/requests shows a Recorded.
type recordedJSON struct {
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	RawQuery string      `json:"raw_query"`
	Host     string      `json:"host"`
	Header   http.Header `json:"header"`
	Body     string      `json:"body"`
	BodySize int64       `json:"body_size"`
	Time     time.Time   `json:"time"`
}

// controlRoute is one /_sim/ endpoint.
type controlRoute struct {
	method string
	handle func(s *Sim, w http.ResponseWriter, r *http.Request)
}

// controlRoutes is the /_sim/ surface: a way for tests in other processes
// (and people running the demo) to see and steer the simulator. It needs no
// auth and is never recorded, delayed or failed, so it stays usable whatever
// faults are injected.
var controlRoutes = map[string]controlRoute{
	"/_sim/stats":    {http.MethodGet, (*Sim).controlStats},
	"/_sim/requests": {http.MethodGet, (*Sim).controlRequests},
	"/_sim/numbers":  {http.MethodGet, (*Sim).controlNumbers},
	"/_sim/revoke":   {http.MethodPost, (*Sim).controlRevoke},
	"/_sim/latency":  {http.MethodPost, (*Sim).controlLatency},
	"/_sim/fail":     {http.MethodPost, (*Sim).controlFail},
	"/_sim/reset":    {http.MethodPost, (*Sim).controlReset},
}

func (s *Sim) serveControl(w http.ResponseWriter, r *http.Request, path string) {
	cr, ok := controlRoutes[path]
	switch {
	case !ok:
		writeFailure(w, http.StatusNotFound, "Not found.")
	case r.Method != cr.method:
		w.Header().Set("Allow", cr.method)
		writeFailure(w, http.StatusMethodNotAllowed, "Method not allowed.")
	default:
		cr.handle(s, w, r)
	}
}

func (s *Sim) controlStats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	stats := struct {
		AuthCalls int            `json:"auth_calls"`
		Routes    map[string]int `json:"routes"`
		Throttled int            `json:"throttled"`
		Tokens    TokenStats     `json:"tokens"`
	}{s.authCalls, maps.Clone(s.routes), s.throttled, s.tokenStats}
	s.mu.Unlock()
	httpjson.Write(w, http.StatusOK, stats)
}

func (s *Sim) controlRequests(w http.ResponseWriter, _ *http.Request) {
	recs := s.Requests()
	out := make([]recordedJSON, 0, len(recs))
	for _, r := range recs {
		out = append(out, recordedJSON{
			Method: r.Method, Path: r.Path, RawQuery: r.RawQuery, Host: r.Host, Header: r.Header,
			Body: string(r.Body), BodySize: r.BodySize, Time: r.Time,
		})
	}
	httpjson.Write(w, http.StatusOK, out)
}

func (s *Sim) controlNumbers(w http.ResponseWriter, _ *http.Request) {
	httpjson.Write(w, http.StatusOK, s.OwnedNumbers())
}

func (s *Sim) controlRevoke(w http.ResponseWriter, _ *http.Request) {
	s.RevokeTokens()
	writeOK(w, "Tokens revoked.", nil)
}

func (s *Sim) controlLatency(w http.ResponseWriter, r *http.Request) {
	var in struct {
		MS *int64 `json:"ms"`
	}
	if !decodeControl(w, r, &in) {
		return
	}
	if in.MS == nil || *in.MS < 0 {
		writeFailure(w, http.StatusBadRequest, "ms must be a number of milliseconds, 0 or more.")
		return
	}
	s.SetLatency(time.Duration(*in.MS) * time.Millisecond)
	writeOK(w, "Latency set.", nil)
}

func (s *Sim) controlFail(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Count  *int `json:"count"`
		Status *int `json:"status"`
		// RetryAfter, in seconds, is sent as Retry-After with the failures.
		RetryAfter *int `json:"retry_after"`
	}
	if !decodeControl(w, r, &in) {
		return
	}
	if in.Count == nil || *in.Count < 0 {
		writeFailure(w, http.StatusBadRequest, "count must be 0 or more.")
		return
	}
	// Informational and 1xx-style statuses cannot end a response.
	if in.Status == nil || *in.Status < 200 || *in.Status > 599 {
		writeFailure(w, http.StatusBadRequest, "status must be an HTTP status from 200 to 599.")
		return
	}
	if in.RetryAfter != nil && *in.RetryAfter < 0 {
		writeFailure(w, http.StatusBadRequest, "retry_after must be 0 or more seconds.")
		return
	}
	s.FailNext(*in.Count, *in.Status)
	if in.RetryAfter != nil && *in.RetryAfter > 0 {
		s.mu.Lock()
		s.failRetry = time.Duration(*in.RetryAfter) * time.Second
		s.mu.Unlock()
	}
	writeOK(w, "Failures scheduled.", nil)
}

func (s *Sim) controlReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	writeOK(w, "Reset.", nil)
}

// decodeControl reads a small JSON control body, answering 400 itself when it
// is not one.
func decodeControl(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields() // a typo in a test's control call should fail loudly
	if err := dec.Decode(v); err != nil {
		writeFailure(w, http.StatusBadRequest, "The request body is not valid JSON: "+err.Error())
		return false
	}
	return true
}
