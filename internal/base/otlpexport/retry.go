package otlpexport

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryable is an attempt's error that a later attempt may not meet: the
// connection failed, or the collector answered 429, 502, 503 or 504 (the
// answers OTLP/HTTP says to retry).
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// statusError is a collector's answer other than a success. It says the
// status only: what a collector answers can echo the request's headers.
type statusError int

func (s statusError) Error() string {
	return "the collector answered " + strconv.Itoa(int(s)) + " " + http.StatusText(int(s))
}

// retryAfter is a Retry-After header's wait in seconds; 0 when there is
// none or it is a date (the backoff decides then).
func retryAfter(v string) time.Duration {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 31)
	if err != nil {
		return 0
	}
	return time.Duration(n) * time.Second
}
