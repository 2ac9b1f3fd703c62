package proxy

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/faxgate/faxgate/policy"
	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/policy/route"
)

// maxKeptAnswer bounds the vendor's 429 kept while the request waits it
// out, to relay it unchanged if the wait does not end in a turn.
const maxKeptAnswer = 64 << 10

// waitOut waits out the vendor's 429 res (upstream_budget.retry_throttled,
// docs/upstream-budget.md#requests-the-vendor-never-saw): the route is held
// already (Answered); the request takes the head of the hold's queue and is
// sent again when its turn comes, when its Retry-After fits within what is
// left of max_wait and its body can be sent again. again reports that the
// request is to be sent again (the upstream leg's deadline restarted for
// it); otherwise res is the answer to relay, the vendor's 429 unchanged, or
// ref the refusal to answer (the caller left while it waited).
func (h *Handler) waitOut(r *http.Request, ex *exchange, res *http.Response) (_ *http.Response, again bool, ref *route.Error) {
	rules, l := &ex.rules.Upstream, &ex.leg
	left := rules.MaxWait - ex.out.Admission.Waited
	if !rules.RetryThrottled || !rules.HonorRetryAfter || left <= 0 ||
		limit.RetryAfter(res.Header.Get("Retry-After"), time.Now(), rules.MaxHold) > left {
		return res, false, nil
	}
	body, ok := resendBody(r)
	if !ok {
		return res, false, nil
	}
	kept, whole := keepAnswer(res)
	if !whole {
		if body != nil {
			body.Close()
		}
		return kept, false, nil
	}
	l.spent += time.Since(l.began)
	l.endDeadline(h.deadlines)
	a := h.opts.Admission.Admit(r.Context(), limit.AdmitRequest{Caller: ex.out.Caller, Route: ex.out.Route,
		Rules: rules, Resend: true, MaxWait: left})
	ex.out.Admission.Waited += a.Waited
	if !a.Allowed || a.Gone {
		// Not sent again: the reader over the copy holds it until closed.
		if body != nil {
			body.Close()
		}
		if a.Gone {
			return nil, false, policy.ErrClientClosed
		}
		return kept, false, nil
	}
	h.opts.Metrics.retried(ex.out.Route, retryThrottled)
	l.resend = body
	h.begin(r, ex, l.spent)
	return nil, true, nil
}

// resendBody is a fresh reader over r's body for one more attempt: nil for
// a bodiless request, or the copy the gateway holds (GetBody). ok is false
// when the body cannot be sent again (it streamed without a copy).
func resendBody(r *http.Request) (io.ReadCloser, bool) {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	if r.GetBody == nil {
		return nil, false
	}
	b, err := r.GetBody()
	return b, err == nil
}

// keepAnswer reads res's body into memory, up to maxKeptAnswer, so res can
// be relayed after its connection is given back; whole is false when the
// body is larger, and res then still reads it all, what was read first.
func keepAnswer(res *http.Response) (_ *http.Response, whole bool) {
	b, err := io.ReadAll(io.LimitReader(res.Body, maxKeptAnswer+1))
	if err != nil || len(b) > maxKeptAnswer {
		res.Body = multiReadCloser{Reader: io.MultiReader(bytes.NewReader(b), res.Body), c: res.Body}
		return res, false
	}
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(b))
	res.ContentLength = int64(len(b))
	return res, true
}
