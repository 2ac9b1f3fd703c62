package faxsim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Window is one of the vendor's limits: Requests per fixed window of Per.
type Window struct {
	Requests int
	Per      time.Duration
}

// ParseWindow reads "N/duration" (e.g. "2500/5m"), the form of faxsim's
// --endpoint-limit and --tenant-limit flags.
func ParseWindow(s string) (Window, error) {
	n, d, ok := strings.Cut(s, "/")
	if !ok {
		return Window{}, fmt.Errorf("%q: want REQUESTS/DURATION, e.g. 2500/5m", s)
	}
	req, err := strconv.Atoi(n)
	if err != nil || req <= 0 {
		return Window{}, fmt.Errorf("%q: requests must be a whole number above 0", s)
	}
	per, err := time.ParseDuration(d)
	if err != nil || per <= 0 {
		return Window{}, fmt.Errorf("%q: the window must be a duration above 0, e.g. 10s", s)
	}
	return Window{Requests: req, Per: per}, nil
}

func (w Window) String() string { return fmt.Sprintf("%d/%s", w.Requests, w.Per) }

// vendorCount is one fixed window's count.
type vendorCount struct {
	start time.Time
	used  int
}

// take counts one request in c's window (starting a new one when the last
// ended) unless the window is full; it reports what is left and when the
// window resets.
func (c *vendorCount) take(w Window, now time.Time, count bool) (ok bool, remaining int, reset time.Time) {
	if c.start.IsZero() || !now.Before(c.start.Add(w.Per)) {
		c.start, c.used = now, 0
	}
	reset = c.start.Add(w.Per)
	if c.used >= w.Requests {
		return false, 0, reset
	}
	if count {
		c.used++
	}
	return true, w.Requests - c.used, reset
}

// throttleLocked applies the vendor's limits (Options.EndpointLimit and
// TenantLimit) to an authenticated request to endpoint: both windows must
// have room, and then both count it. A refused request counts in neither,
// as the vendor's 429 does not spend budget. retry is when the fuller
// window resets.
func (s *Sim) throttleLocked(endpoint string, now time.Time) (adm admission, throttled bool) {
	adm.limit = s.endpointLimit.Requests
	ec := s.endpointCount[endpoint]
	if ec == nil {
		ec = &vendorCount{}
		s.endpointCount[endpoint] = ec
	}
	okT := true
	var resetT time.Time
	if s.tenantLimit.Requests > 0 {
		okT, _, resetT = s.tenantCount.take(s.tenantLimit, now, false)
	}
	okE, resetE := true, time.Time{}
	if s.endpointLimit.Requests > 0 {
		okE, _, resetE = ec.take(s.endpointLimit, now, false)
	}
	if !okT || !okE {
		retry := resetE
		if !okT && (okE || resetT.After(retry)) {
			retry = resetT
		}
		adm.remaining, adm.reset = 0, retry
		if !okE {
			adm.reset = resetE
		}
		adm.retryAfter = retry.Sub(now)
		return adm, true
	}
	if s.tenantLimit.Requests > 0 {
		s.tenantCount.take(s.tenantLimit, now, true)
	}
	if s.endpointLimit.Requests > 0 {
		_, adm.remaining, adm.reset = ec.take(s.endpointLimit, now, true)
	} else {
		adm.limit = s.tenantLimit.Requests
		_, adm.remaining, adm.reset = s.tenantCount.take(s.tenantLimit, now, false)
	}
	return adm, false
}
