// Package faxsim is an in-memory stand-in for the vendor's Customer API v1
// (docs/development.md, The simulator; the endpoints are the route table of
// docs/callers-and-policy.md): real token issue and expiry, the 13 documented
// endpoints with their envelopes and validation messages, a few undocumented
// fax endpoints that exercise big and DELETE bodies, and a control surface
// under /_sim/ that lets tests see exactly what reached the upstream and
// inject latency and failures.
//
// The gateway's demo, its tests and callers' local development all run
// against it, so it favours being faithful to the spec over being convenient:
// routes match the raw request path exactly, and every request is recorded as
// it arrived on the wire.
package faxsim

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/faxgate/faxgate/internal/base/clock"
)

// Options configures a Sim.
type Options struct {
	// APIKey is the one valid api_secret_key. An empty key authenticates
	// nobody, so a forgotten key cannot turn the simulator into an open door.
	APIKey string
	// TokenTTL is the lifetime of issued tokens; 0 means 24h, the upstream's
	// confirmed value. expires_in reports it in whole seconds.
	TokenTTL time.Duration
	// EndpointLimit and TenantLimit, when set, are enforced as the vendor
	// does (upstream-facts.md: 2,500 per 5 minutes per endpoint, 100,000 per
	// 24 hours per tenant): fixed windows over authenticated requests, per
	// endpoint and for all of them, answered past the limit with 429 and
	// Retry-After. Unset, the simulator reports 2,500 per 5 minutes per token
	// in X-RateLimit-* and never refuses.
	EndpointLimit, TenantLimit Window
	// Now is the clock that token expiry, rate-limit windows and timestamps
	// follow, so tests can advance time instead of sleeping. It is called from
	// concurrent requests, so it must be safe for that. nil means time.Now.
	Now func() time.Time
}

const (
	// defaultTTL is the token lifetime the upstream documents (86400 s).
	defaultTTL = 24 * time.Hour
	// maxBody bounds what one request may make the simulator hold in memory;
	// fax bodies of several MB are normal, so the bound is generous.
	maxBody = 64 << 20
	// rateLimit and rateWindow mirror the upstream's per-endpoint budget of
	// 2,500 requests per 5 minutes. The simulator reports it, never enforces it.
	rateLimit  = 2500
	rateWindow = 5 * time.Minute
)

// Sim is the simulated upstream. It is an http.Handler; all of its state sits
// behind one mutex, so it is safe for concurrent use.
type Sim struct {
	now   func() time.Time
	ttl   time.Duration
	table routeTable

	mu     sync.Mutex
	apiKey string
	tokens map[string]time.Time // access token -> expiry: the valid ones
	issued map[string]*issuedToken
	rate   map[string]*rateCount

	endpointLimit, tenantLimit Window
	endpointCount              map[string]*vendorCount
	tenantCount                vendorCount
	throttled                  int

	contacts    []*contact // creation order, which is also list order
	contactByID map[string]*contact
	contactSeq  int

	numbers []OwnedNumber

	templates   map[string]*template
	templateIDs []string // list order
	fieldSeq    int

	// Observation and fault injection; Reset clears these.
	authCalls  int
	tokenStats TokenStats
	routes     map[string]int
	ring       ring
	latency    time.Duration
	failLeft   int
	failStatus int
	failRetry  time.Duration // Retry-After sent with the injected failures; 0 sends none
}

// rateCount is one token's fixed rate-limit window.
type rateCount struct {
	start time.Time
	used  int
}

// New returns a Sim holding the seed data: two contacts, three owned numbers
// and the template "tpl_1", so the demo has something to show.
func New(opts Options) *Sim {
	s := &Sim{
		now:    opts.Now,
		ttl:    opts.TokenTTL,
		apiKey: opts.APIKey,
		tokens: make(map[string]time.Time),
		issued: make(map[string]*issuedToken),
		rate:   make(map[string]*rateCount),

		endpointLimit: opts.EndpointLimit,
		tenantLimit:   opts.TenantLimit,
		endpointCount: make(map[string]*vendorCount),
		routes:        make(map[string]int),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.ttl <= 0 {
		s.ttl = defaultTTL
	}
	s.table = newRouteTable()
	s.seedContacts()
	s.seedNumbers()
	s.seedTemplates()
	return s
}

// call is one admitted request as the endpoint handlers see it: the body is
// already read, because it had to be recorded before anything else happened.
type call struct {
	r      *http.Request
	body   []byte
	params []string // path parameters in template order
}

// ServeHTTP records the request, applies injected latency and failures, then
// routes it the way the upstream would: 405 for a known path with the wrong
// method, 401 for a missing or bad Bearer token, 404 for an unknown path.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := rawPath(r)
	if path == "/_sim" || strings.HasPrefix(path, "/_sim/") {
		s.serveControl(w, r, path)
		return
	}

	body, size, readErr := readBody(r)
	rt, params := s.table.match(path)
	adm := s.admit(r, path, rt, body, size)

	if adm.latency > 0 && !clock.Sleep(r.Context(), clock.Real{}, adm.latency) {
		return // the caller is gone; nobody would read a response
	}

	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(adm.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(adm.remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(adm.reset.Unix(), 10))

	switch {
	case adm.throttled:
		// Whole seconds, rounded up, as the vendor sends them.
		h.Set("Retry-After", strconv.FormatInt(int64((adm.retryAfter+time.Second-1)/time.Second), 10))
		writeFailure(w, http.StatusTooManyRequests, "Too Many Attempts.")
		return
	case adm.failStatus != 0:
		if adm.failRetry > 0 {
			h.Set("Retry-After", strconv.FormatInt(int64((adm.failRetry+time.Second-1)/time.Second), 10))
		}
		writeFailure(w, adm.failStatus, "simulated failure")
		return
	case errors.Is(readErr, errBodyTooLarge):
		writeFailure(w, http.StatusRequestEntityTooLarge, "The request body is too large.")
		return
	case readErr != nil:
		writeFailure(w, http.StatusBadRequest, "The request body could not be read.")
		return
	}

	if rt == nil {
		if strings.HasPrefix(path, "/v1/") && !adm.tokenOK {
			// The upstream guards its whole /v1 surface, so an unknown path
			// says nothing until the caller is authenticated.
			writeFailure(w, http.StatusUnauthorized, "Unauthenticated.")
			return
		}
		writeFailure(w, http.StatusNotFound, "Not found.")
		return
	}
	handle, ok := rt.methods[r.Method]
	if !ok && r.Method == http.MethodHead {
		// Like most frameworks, every GET route also answers HEAD.
		handle, ok = rt.methods[http.MethodGet]
	}
	if !ok {
		// Method matching happens at routing, before authentication, as in the
		// framework the upstream is built on.
		h.Set("Allow", rt.allow)
		writeFailure(w, http.StatusMethodNotAllowed, "Method not allowed.")
		return
	}
	if !rt.public && !adm.tokenOK {
		writeFailure(w, http.StatusUnauthorized, "Unauthenticated.")
		return
	}
	handle(s, w, &call{r: r, body: body, params: params})
}

// admission is what admit decided about one request under the lock.
type admission struct {
	latency    time.Duration
	failStatus int
	failRetry  time.Duration
	tokenOK    bool
	limit      int
	remaining  int
	reset      time.Time
	throttled  bool
	retryAfter time.Duration
}

// admit does, in one critical section, everything that must see the request
// before it is answered: recording, counting, fault injection, token check
// and the rate-limit window.
func (s *Sim) admit(r *http.Request, path string, rt *route, body []byte, size int64) admission {
	now := s.now()
	tok, hasBearer := bearer(r.Header)

	s.mu.Lock()
	defer s.mu.Unlock()

	s.ring.add(record(r, path, body, size, now))
	key := r.Method + " other"
	if rt != nil {
		key = r.Method + " " + rt.template
		if rt.template == "/v1/auth" && r.Method == http.MethodPost {
			s.authCalls++
		}
	}
	s.routes[key]++

	adm := admission{latency: s.latency}
	if s.failLeft > 0 {
		s.failLeft--
		adm.failStatus, adm.failRetry = s.failStatus, s.failRetry
	}
	if hasBearer {
		s.countTokenLocked(tok, now)
	}
	bucket := ""
	if hasBearer && s.tokenValidLocked(tok, now) {
		adm.tokenOK = true
		bucket = tok
	}
	if s.endpointLimit.Requests > 0 || s.tenantLimit.Requests > 0 {
		if !adm.tokenOK || adm.failStatus != 0 {
			adm.limit, adm.remaining, adm.reset = max(s.endpointLimit.Requests, s.tenantLimit.Requests), 0, now
			return adm
		}
		t, throttled := s.throttleLocked(key, now)
		t.latency, t.tokenOK = adm.latency, true
		if throttled {
			s.throttled++
		}
		t.throttled = throttled
		return t
	}
	adm.limit = rateLimit
	adm.remaining, adm.reset = s.takeRateLocked(bucket, now)
	return adm
}

// takeRateLocked counts one request against bucket (a token, or "" for
// requests without a valid one) and reports what is left of its window.
func (s *Sim) takeRateLocked(bucket string, now time.Time) (remaining int, reset time.Time) {
	rc := s.rate[bucket]
	if rc == nil || !now.Before(rc.start.Add(rateWindow)) {
		rc = &rateCount{start: now}
		s.rate[bucket] = rc
	}
	rc.used++
	return max(0, rateLimit-rc.used), rc.start.Add(rateWindow)
}

var errBodyTooLarge = errors.New("request body too large")

// readBody reads the whole body up front: it must be recorded before the
// auth check, and handlers (multipart included) then parse it from memory.
func readBody(r *http.Request) (body []byte, size int64, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	body, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if len(body) > maxBody {
		return body[:maxBody], int64(len(body)), errBodyTooLarge
	}
	return body, int64(len(body)), err
}
