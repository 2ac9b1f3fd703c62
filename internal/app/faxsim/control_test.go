package faxsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestFailNext(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	e.sim.FailNext(2, 503)
	// Control requests are neither failed nor consume a failure.
	if r := e.do(t, "GET", "/_sim/stats", nil, ""); r.code != 200 {
		t.Errorf("/_sim/stats during failures: got %d, want 200", r.code)
	}
	steps := []struct {
		name, method, path string
		want               int
	}{
		{"first fails", "GET", "/v1/esign_templates", 503},
		{"token endpoint fails too", "POST", "/v1/auth", 503},
		{"third succeeds", "GET", "/v1/esign_templates", 200},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			body := `{"api_secret_key":"` + testKey + `"}`
			r := e.do(t, st.method, st.path, authHdr(tok), body)
			if st.want != 200 {
				wantFailure(t, r, st.want, "simulated failure")
				return
			}
			if r.code != 200 {
				t.Errorf("got %d %s, want 200", r.code, r.raw)
			}
		})
	}
	t.Run("failed auth still counted", func(t *testing.T) {
		if got := e.sim.AuthCalls(); got != 2 {
			t.Errorf("AuthCalls: got %d, want 2", got)
		}
	})
	t.Run("invalid status becomes 500", func(t *testing.T) {
		e.sim.FailNext(1, 42)
		wantFailure(t, e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""), 500, "simulated failure")
	})
}

func TestSetLatency(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	const d = 60 * time.Millisecond
	e.sim.SetLatency(d)
	start := time.Now()
	if r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""); r.code != 200 {
		t.Fatalf("got %d, want 200", r.code)
	}
	if got := time.Since(start); got < d {
		t.Errorf("response after %v, want at least %v", got, d)
	}
	// Against a latency of a minute, a control request that was delayed
	// would be decades of a busy machine's slowness late.
	e.sim.SetLatency(time.Minute)
	defer e.sim.SetLatency(0)
	start = time.Now()
	e.do(t, "GET", "/_sim/stats", nil, "")
	if got := time.Since(start); got >= 30*time.Second {
		t.Errorf("/_sim/stats took %v with a latency of a minute; control requests must not be delayed", got)
	}
}

func TestLatencyHonoursCancellation(t *testing.T) {
	sim := New(Options{APIKey: testKey})
	sim.SetLatency(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req := httptest.NewRequest("GET", "/v1/esign_templates", nil).WithContext(ctx)
	rec := httptest.NewRecorder()
	start := time.Now()
	sim.ServeHTTP(rec, req)
	if got := time.Since(start); got > 2*time.Second {
		t.Errorf("ServeHTTP returned after %v, want soon after the 20ms cancellation", got)
	}
	if rec.Body.Len() != 0 {
		t.Errorf("wrote %q to a cancelled request, want nothing", rec.Body.String())
	}
}

func TestReset(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	e.api(t, "POST", "/v1/numbers/delete", `{"number_id":"num_1001","order_id":"ord_5001"}`)
	e.sim.SetLatency(time.Hour)
	e.sim.FailNext(5, 500)
	e.sim.Reset()
	if got := e.sim.AuthCalls(); got != 0 {
		t.Errorf("AuthCalls after Reset: got %d, want 0", got)
	}
	if got := e.sim.RouteCounts(); len(got) != 0 {
		t.Errorf("RouteCounts after Reset: got %v, want empty", got)
	}
	if got := e.sim.Requests(); len(got) != 0 {
		t.Errorf("Requests after Reset: got %d, want 0", len(got))
	}
	// Faults are gone (this would hang an hour or fail otherwise) and the old
	// token still works.
	if r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""); r.code != 200 {
		t.Errorf("request after Reset: got %d %s, want 200", r.code, r.raw)
	}
	if got := len(e.sim.OwnedNumbers()); got != 2 {
		t.Errorf("owned numbers after Reset: got %d, want 2 (data kept)", got)
	}
}

func TestControlHTTP(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	e.do(t, "POST", "/v1/numbers/delete?x=1", authHdr(tok), `{"number_id":"num_1001","order_id":"ord_5001"}`)

	t.Run("stats", func(t *testing.T) {
		r := e.do(t, "GET", "/_sim/stats", nil, "")
		want := `{"auth_calls":1,"routes":{"POST /v1/auth":1,"POST /v1/numbers/delete":1},"throttled":0,` +
			`"tokens":{"valid":1,"revoked":0,"expired":0,"unknown":0,"distinct":1}}`
		if r.code != 200 || r.raw != want {
			t.Errorf("got %d %s, want 200 %s", r.code, r.raw, want)
		}
	})
	t.Run("requests", func(t *testing.T) {
		r := e.do(t, "GET", "/_sim/requests", nil, "")
		var recs []recordedJSON
		if err := json.Unmarshal([]byte(r.raw), &recs); err != nil {
			t.Fatalf("decoding %s: %v", r.raw, err)
		}
		if len(recs) != 2 {
			t.Fatalf("got %d records, want 2", len(recs))
		}
		got := recs[1]
		if got.Method != "POST" || got.Path != "/v1/numbers/delete" || got.RawQuery != "x=1" ||
			got.Header.Get("Authorization") != "Bearer "+tok || got.Body != `{"number_id":"num_1001","order_id":"ord_5001"}` {
			t.Errorf("got %+v, want the delete request with its header and body", got)
		}
	})
	t.Run("numbers", func(t *testing.T) {
		var nums []OwnedNumber
		_ = json.Unmarshal([]byte(e.do(t, "GET", "/_sim/numbers", nil, "").raw), &nums)
		if len(nums) != 2 {
			t.Errorf("got %v, want 2 numbers left", nums)
		}
	})
	t.Run("latency", func(t *testing.T) {
		if r := e.do(t, "POST", "/_sim/latency", nil, `{"ms":30}`); r.code != 200 {
			t.Fatalf("got %d %s", r.code, r.raw)
		}
		start := time.Now()
		e.do(t, "GET", "/v1/esign_templates", authHdr(tok), "")
		if got := time.Since(start); got < 30*time.Millisecond {
			t.Errorf("response after %v, want at least 30ms", got)
		}
		e.do(t, "POST", "/_sim/latency", nil, `{"ms":0}`)
	})
	t.Run("fail", func(t *testing.T) {
		if r := e.do(t, "POST", "/_sim/fail", nil, `{"count":1,"status":502}`); r.code != 200 {
			t.Fatalf("got %d %s", r.code, r.raw)
		}
		wantFailure(t, e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""), 502, "simulated failure")
	})
	t.Run("fail 429 with Retry-After", func(t *testing.T) {
		if r := e.do(t, "POST", "/_sim/fail", nil, `{"count":1,"status":429,"retry_after":2}`); r.code != 200 {
			t.Fatalf("got %d %s", r.code, r.raw)
		}
		r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), "")
		wantFailure(t, r, 429, "simulated failure")
		if got := r.header.Get("Retry-After"); got != "2" {
			t.Errorf("Retry-After %q, want 2", got)
		}
		if r := e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""); r.code != 200 || r.header.Get("Retry-After") != "" {
			t.Errorf("after the one failure: %d, Retry-After %q", r.code, r.header.Get("Retry-After"))
		}
	})
	t.Run("revoke", func(t *testing.T) {
		if r := e.do(t, "POST", "/_sim/revoke", nil, ""); r.code != 200 {
			t.Fatalf("got %d %s", r.code, r.raw)
		}
		wantFailure(t, e.do(t, "GET", "/v1/esign_templates", authHdr(tok), ""), 401, "Unauthenticated.")
	})
	t.Run("reset", func(t *testing.T) {
		if r := e.do(t, "POST", "/_sim/reset", nil, ""); r.code != 200 {
			t.Fatalf("got %d %s", r.code, r.raw)
		}
		if r := e.do(t, "GET", "/_sim/stats", nil, ""); r.raw != `{"auth_calls":0,"routes":{},"throttled":0,"tokens":{"valid":0,"revoked":0,"expired":0,"unknown":0,"distinct":0}}` {
			t.Errorf("stats after reset: got %s", r.raw)
		}
	})
	bad := []struct {
		name, method, path, body string
		code                     int
	}{
		{"unknown control", "GET", "/_sim/nope", "", 404},
		{"wrong method", "POST", "/_sim/stats", "", 405},
		{"latency negative", "POST", "/_sim/latency", `{"ms":-1}`, 400},
		{"latency missing", "POST", "/_sim/latency", `{}`, 400},
		{"latency typo", "POST", "/_sim/latency", `{"msec":5}`, 400},
		{"fail bad status", "POST", "/_sim/fail", `{"count":1,"status":99}`, 400},
		{"fail not JSON", "POST", "/_sim/fail", `count=1`, 400},
		{"fail negative retry_after", "POST", "/_sim/fail", `{"count":1,"status":429,"retry_after":-1}`, 400},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if r := e.do(t, tc.method, tc.path, nil, tc.body); r.code != tc.code || r.body["status"] != float64(0) {
				t.Errorf("got %d %s, want %d with status 0", r.code, r.raw, tc.code)
			}
		})
	}
	t.Run("control requests are not recorded", func(t *testing.T) {
		if got := e.sim.Requests(); len(got) != 0 {
			t.Errorf("got %d records, want 0", len(got))
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	e := newEnv(t)
	const workers, each = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			auth, err := e.send("POST", "/v1/auth", jsonHdr, `{"api_secret_key":"`+testKey+`"}`)
			if err != nil || auth.code != 200 {
				errs <- fmt.Errorf("worker %d auth: %v %d %s", w, err, auth.code, auth.raw)
				return
			}
			tok := auth.body["data"].(map[string]any)["access_token"].(string)
			for i := range each {
				var method, path, body string
				switch i % 4 {
				case 0:
					method, path, body = "POST", "/v1/contacts/create", fmt.Sprintf(`{"first_name":"W%d","last_name":"%d"}`, w, i)
				case 1:
					method, path, body = "POST", "/v1/contacts/list", `{}`
				case 2:
					method, path, body = "POST", "/v1/esign_templates/tpl_1/fields", `{"fields":[{"title":"x"}]}`
				case 3:
					method, path, body = "PATCH", "/v1/esign_templates/tpl_1/fields/fld_1", `{"fields":[{"id":"fld_1","title":"y"}]}`
				}
				r, err := e.send(method, path, authHdr(tok), body)
				if err != nil || r.code != 200 {
					errs <- fmt.Errorf("worker %d request %d: %v %d %s", w, i, err, r.code, r.raw)
				}
				_ = e.sim.RouteCounts()
			}
			_ = e.sim.Requests() // reads the ring while others write it
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	counts := e.sim.RouteCounts()
	total := 0
	for _, n := range counts {
		total += n
	}
	if want := workers * (each + 1); total != want {
		t.Errorf("requests counted: got %d, want %d (%v)", total, want, counts)
	}
	if got, want := counts["POST /v1/contacts/create"], workers*3; got != want {
		t.Errorf("creates counted: got %d, want %d", got, want)
	}
	list := dataList(t, e.api(t, "POST", "/v1/contacts/list", `{}`))
	if want := 2 + workers*3; len(list) != want {
		t.Errorf("contacts after concurrent creates: got %d, want %d", len(list), want)
	}
}
