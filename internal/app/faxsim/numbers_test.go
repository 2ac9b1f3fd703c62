package faxsim

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"
)

func TestFilledRequirements(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	post := func(t *testing.T, body string) response {
		t.Helper()
		return e.do(t, "POST", "/v1/numbers/filled_requirements", authHdr(tok), body)
	}
	t.Run("success", func(t *testing.T) {
		r := post(t, `{"country_code":"US"}`)
		wantOK(t, r, "Filled requirements fetched successfully.")
		list := dataList(t, r)
		if len(list) < 2 || len(list) > 3 {
			t.Fatalf("got %d requirements, want 2 or 3", len(list))
		}
		uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
		sawNull, sawValue := false, false
		for i, fr := range list {
			if id, ok := fr["id"].(float64); !ok || id != float64(int64(id)) {
				t.Errorf("%d id: got %v, want an integer", i, fr["id"])
			}
			if s, _ := fr["requirement_id"].(string); !uuid.MatchString(s) {
				t.Errorf("%d requirement_id: got %q, want a UUID", i, s)
			}
			if fr["type"] != "textual" || fr["country_code"] != "US" || fr["other_data"] != "" || fr["name"] == "" {
				t.Errorf("%d: got %v, want type textual, country_code US, other_data \"\" and a name", i, fr)
			}
			switch v, present := fr["value"]; {
			case !present:
				t.Errorf("%d: value missing, want null or a string", i)
			case v == nil:
				sawNull = true
			default:
				if _, ok := v.(string); !ok {
					t.Errorf("%d value: got %v, want null or a string", i, v)
				}
				sawValue = true
			}
		}
		if !sawNull || !sawValue {
			t.Errorf("want both a saved value and a null value, got %s", r.raw)
		}
	})
	t.Run("deterministic and case-insensitive", func(t *testing.T) {
		a, b := post(t, `{"country_code":"GB"}`), post(t, `{"country_code":"gb"}`)
		if a.raw != b.raw {
			t.Errorf("GB and gb differ:\n%s\n%s", a.raw, b.raw)
		}
		if us := post(t, `{"country_code":"US"}`); us.raw == a.raw {
			t.Errorf("US and GB give the same requirements")
		}
	})
	failures := []struct{ name, body, msg string }{
		{"missing", `{}`, "The country code field is required."},
		{"empty", `{"country_code":""}`, "The country code field is required."},
		{"null", `{"country_code":null}`, "The country code field is required."},
		{"blank", `{"country_code":"  "}`, "The country code field is required."},
		{"three letters", `{"country_code":"USA"}`, "The country code must be 2 characters."},
		{"one letter", `{"country_code":"U"}`, "The country code must be 2 characters."},
		{"digits", `{"country_code":"12"}`, "The country code must only contain letters."},
		{"not a string", `{"country_code":1}`, "The country code must be a string."},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) { wantFailure(t, post(t, tc.body), 422, tc.msg) })
	}
}

func TestAvailableList(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	post := func(t *testing.T, body string) response {
		t.Helper()
		return e.do(t, "POST", "/v1/numbers/available-list", authHdr(tok), body)
	}
	t.Run("success", func(t *testing.T) {
		r := post(t, `{"country_code":"US","code":"415"}`)
		if r.code != 200 || r.body["status"] != float64(1) {
			t.Fatalf("got %d %s, want 200 status 1", r.code, r.raw)
		}
		if _, has := r.body["message"]; has {
			t.Errorf("message present in %s; the spec documents none", r.raw)
		}
		var nums []string
		if err := json.Unmarshal([]byte(r.raw), &struct{ Data *[]string }{&nums}); err != nil {
			t.Fatal(err)
		}
		if len(nums) != 5 {
			t.Fatalf("got %d numbers, want 5", len(nums))
		}
		for _, n := range nums {
			if !regexp.MustCompile(`^\+1415\d{7}$`).MatchString(n) {
				t.Errorf("number %q: want +1415 and 7 digits", n)
			}
		}
		if len(slices.Compact(slices.Sorted(slices.Values(nums)))) != 5 {
			t.Errorf("duplicate numbers: %v", nums)
		}
		if again := post(t, `{"country_code":"US","code":"415"}`); again.raw != r.raw {
			t.Errorf("not deterministic:\n%s\n%s", r.raw, again.raw)
		}
	})
	t.Run("country without stock", func(t *testing.T) {
		if r := post(t, `{"country_code":"ZZ","code":"1"}`); r.raw != `{"status":1,"data":[]}` {
			t.Errorf("got %s, want empty data", r.raw)
		}
	})
	failures := []struct{ name, body, msg string }{
		{"country missing", `{"code":"415"}`, "The country code field is required."},
		{"country too long", `{"country_code":"USA","code":"415"}`, "The country code must be 2 characters."},
		{"code missing", `{"country_code":"US"}`, "The code field is required."},
		{"code empty", `{"country_code":"US","code":""}`, "The code field is required."},
		{"code is a calling prefix", `{"country_code":"US","code":"+1"}`, "The code must be a number."},
		{"code not a string", `{"country_code":"US","code":415}`, "The code must be a string."},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) { wantFailure(t, post(t, tc.body), 422, tc.msg) })
	}
}

func TestNumberDelete(t *testing.T) {
	e := newEnv(t)
	tok := e.token(t)
	del := func(t *testing.T, body string) response {
		t.Helper()
		return e.do(t, "POST", "/v1/numbers/delete", authHdr(tok), body)
	}
	steps := []struct {
		name, body string
		code       int
		msg        string
	}{
		{"owned pair", `{"number_id":"num_1001","order_id":"ord_5001"}`, 200, "Number deleted successfully."},
		{"same pair again", `{"number_id":"num_1001","order_id":"ord_5001"}`, 404, "Number not found."},
		{"mismatched pair", `{"number_id":"num_1002","order_id":"ord_5003"}`, 404, "Number not found."},
		{"unknown", `{"number_id":"num_9","order_id":"ord_9"}`, 404, "Number not found."},
		{"number_id missing", `{"order_id":"ord_5002"}`, 422, "The number id field is required."},
		{"order_id missing", `{"number_id":"num_1002"}`, 422, "The order id field is required."},
		{"number_id not a string", `{"number_id":1002,"order_id":"ord_5002"}`, 422, "The number id must be a string."},
		{"malformed JSON", `{"number_id":"num_1002",`, 400, "The request body is not valid JSON."},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			r := del(t, st.body)
			if st.code == 200 {
				if want := `{"status":1,"message":"` + st.msg + `"}`; r.code != 200 || r.raw != want {
					t.Errorf("got %d %s, want 200 %s", r.code, r.raw, want)
				}
				return
			}
			wantFailure(t, r, st.code, st.msg)
		})
	}
	want := []OwnedNumber{
		{NumberID: "num_1002", OrderID: "ord_5002", Number: "+14155550124"},
		{NumberID: "num_1003", OrderID: "ord_5003", Number: "+12125550100"},
	}
	if got := e.sim.OwnedNumbers(); !slices.Equal(got, want) {
		t.Errorf("OwnedNumbers: got %v, want %v", got, want)
	}
	r := e.do(t, "GET", "/_sim/numbers", nil, "")
	var viaHTTP []OwnedNumber
	if err := json.Unmarshal([]byte(r.raw), &viaHTTP); err != nil || !slices.Equal(viaHTTP, want) {
		t.Errorf("/_sim/numbers: got %s (%v), want %v", r.raw, err, want)
	}
}
