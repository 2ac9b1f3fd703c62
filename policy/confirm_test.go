package policy

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/policy/route"
)

func TestCheckConfirm(t *testing.T) {
	const (
		iR  = route.CodeInvalidRequest
		cR  = route.CodeConfirmationRequired
		std = `{"number_id":"n-1","order_id":"o-9"}`
	)
	for _, tc := range []struct {
		name, query, body, header string
		number, order, code       string
	}{
		// Accepted.
		{name: "plain", body: std, header: "n-1", number: "n-1", order: "o-9"},
		{name: "no order_id", body: `{"number_id":"n-1"}`, header: "n-1", number: "n-1"},
		{name: "empty order_id", body: `{"number_id":"n-1","order_id":""}`, header: "n-1", number: "n-1"},
		{name: "whitespace around", body: " \r\n\t" + std + "\n ", header: "n-1", number: "n-1", order: "o-9"},
		{name: "escaped key", body: `{"number\u005fid":"n-1"}`, header: "n-1", number: "n-1"},
		{name: "escaped value", body: `{"number_id":"n\u002d1"}`, header: "n-1", number: "n-1"},
		{name: "other keys and nesting", body: `{"a":[1,{"b":null}],"number_id":"n-1","c":{"number_id":"x","NUMBER_ID":"y"}}`, header: "n-1", number: "n-1"},
		{name: "non-ASCII id", body: `{"number_id":"n\u00e9"}`, header: "n\u00e9", number: "n\u00e9"},

		// The query string.
		{name: "query", query: "number_id=n-2", body: std, header: "n-1", code: iR},
		{name: "query even with matching header", query: "x=1", body: std, header: "n-1", code: iR},

		// Not one JSON object.
		{name: "empty body", body: "", header: "n-1", code: iR},
		{name: "whitespace body", body: "  ", header: "n-1", code: iR},
		{name: "array", body: `[{"number_id":"n-1"}]`, header: "n-1", code: iR},
		{name: "string", body: `"n-1"`, header: "n-1", code: iR},
		{name: "null", body: `null`, header: "n-1", code: iR},
		{name: "two objects", body: std + std, header: "n-1", code: iR},
		{name: "two objects with space", body: std + " {}", header: "n-1", code: iR},
		{name: "trailing garbage", body: std + "x", header: "n-1", code: iR},
		{name: "trailing brace", body: std + "}", header: "n-1", code: iR},
		{name: "trailing NUL", body: std + "\x00", header: "n-1", code: iR},
		{name: "trailing comma", body: `{"number_id":"n-1",}`, header: "n-1", code: iR},
		{name: "missing comma", body: `{"number_id":"n-1" "order_id":"o"}`, header: "n-1", code: iR},
		{name: "unterminated", body: `{"number_id":"n-1"`, header: "n-1", code: iR},
		{name: "invalid nested", body: `{"number_id":"n-1","x":[1,}`, header: "n-1", code: iR},
		{name: "single quotes", body: `{'number_id':'n-1'}`, header: "n-1", code: iR},
		{name: "comment", body: `{"number_id":"n-1"/*x*/}`, header: "n-1", code: iR},
		{name: "BOM", body: "\xef\xbb\xbf" + std, header: "n-1", code: iR},
		{name: "invalid UTF-8 in value", body: "{\"number_id\":\"n-1\",\"x\":\"\xff\"}", header: "n-1", code: iR},
		{name: "invalid UTF-8 in key", body: "{\"number_id\xc0\":\"n-2\",\"number_id\":\"n-1\"}", header: "n-1", code: iR},
		{name: "UTF-16", body: "\xff\xfe{\x00}\x00", header: "n-1", code: iR},

		// Duplicate keys, exact and after case folding.
		{name: "duplicate", body: `{"number_id":"a","number_id":"b"}`, header: "a", code: iR},
		{name: "duplicate same value", body: `{"number_id":"a","number_id":"a"}`, header: "a", code: iR},
		{name: "duplicate case", body: `{"number_id":"a","Number_Id":"b"}`, header: "a", code: iR},
		{name: "duplicate case first", body: `{"NUMBER_ID":"b","number_id":"a"}`, header: "a", code: iR},
		{name: "duplicate escaped", body: `{"number\u005fid":"a","number_id":"a"}`, header: "a", code: iR},
		{name: "duplicate escaped upper", body: `{"number_id":"a","\u004eumber_id":"a"}`, header: "a", code: iR},
		{name: "duplicate order_id", body: `{"number_id":"a","order_id":"o","ORDER_ID":"p"}`, header: "a", code: iR},
		{name: "duplicate other key", body: `{"number_id":"a","x":1,"X":2}`, header: "a", code: iR},
		{name: "duplicate Kelvin sign", body: `{"number_id":"a","k":1,"\u212a":2}`, header: "a", code: iR},
		// Regression (review): keys other runtimes fold or truncate to number_id.
		{name: "dotless i key", body: `{"number_id":"A","number_ıd":"B"}`, header: "A", code: iR},
		{name: "dotted capital I key", body: `{"number_id":"A","NUMBER_İD":"B"}`, header: "A", code: iR},
		{name: "NUL in key", body: `{"number_id":"A","number_id\u0000":"B"}`, header: "A", code: iR},
		{name: "space in key", body: `{"number_id":"A","number_id ":"B"}`, header: "A", code: iR},
		{name: "duplicate long s", body: `{"number_id":"a","s":1,"\u017f":2}`, header: "a", code: iR},
		{name: "duplicate lone surrogates", body: `{"number_id":"a","x\ud800":1,"x\udc00":2}`, header: "a", code: iR},

		// number_id and order_id.
		{name: "number_id missing", body: `{"order_id":"o"}`, header: "o", code: iR},
		{name: "number_id other case only", body: `{"Number_Id":"a"}`, header: "a", code: iR},
		{name: "number_id empty", body: `{"number_id":""}`, header: "", code: iR},
		{name: "number_id number", body: `{"number_id":123}`, header: "123", code: iR},
		{name: "number_id null", body: `{"number_id":null}`, header: "null", code: iR},
		{name: "number_id bool", body: `{"number_id":true}`, header: "true", code: iR},
		{name: "number_id object", body: `{"number_id":{"id":"a"}}`, header: "a", code: iR},
		{name: "number_id array", body: `{"number_id":["a"]}`, header: "a", code: iR},
		{name: "number_id lone surrogate", body: `{"number_id":"\ud800"}`, header: "\ufffd", code: iR},
		{name: "number_id replacement char", body: `{"number_id":"a\ufffd"}`, header: "a\ufffd", code: iR},
		{name: "order_id number", body: `{"number_id":"a","order_id":7}`, header: "a", code: iR},
		{name: "order_id null", body: `{"number_id":"a","order_id":null}`, header: "a", code: iR},

		// The confirmation header.
		{name: "header missing", body: std, header: "", code: cR},
		{name: "header mismatch", body: std, header: "n-2", code: cR},
		{name: "header is order_id", body: std, header: "o-9", code: cR},
		{name: "header other case", body: `{"number_id":"abc"}`, header: "ABC", code: cR},
		{name: "header padded", body: std, header: " n-1", code: cR},
		{name: "header prefix", body: std, header: "n-", code: cR},
		{name: "header longer", body: std, header: "n-12", code: cR},
		{name: "header from nested number_id", body: `{"c":{"number_id":"x"},"number_id":"n-1"}`, header: "x", code: cR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			num, ord, err := CheckConfirm(tc.query, []byte(tc.body), tc.header)
			if tc.code != "" {
				if err == nil {
					t.Fatalf("CheckConfirm = %q, %q, nil; want %s", num, ord, tc.code)
				}
				if err.Code != tc.code {
					t.Fatalf("CheckConfirm error = %v, want %s", err, tc.code)
				}
				wantStatus := map[string]int{iR: 400, cR: 428}[tc.code]
				if err.Status != wantStatus {
					t.Errorf("status %d, want %d", err.Status, wantStatus)
				}
				if num != "" || ord != "" {
					t.Errorf("refusal returned ids %q, %q", num, ord)
				}
				return
			}
			if err != nil {
				t.Fatalf("CheckConfirm error = %v", err)
			}
			if num != tc.number || ord != tc.order {
				t.Errorf("CheckConfirm = %q, %q; want %q, %q", num, ord, tc.number, tc.order)
			}
		})
	}
}

// TestCheckConfirmMessagesDoNotEcho: the number ID is personal data of a sort
// and the body is never logged.
func TestCheckConfirmMessagesDoNotEcho(t *testing.T) {
	for _, c := range [][3]string{
		{"", `{"number_id":"SECRET1"}`, "SECRET2"},
		{"SECRET1", `{"number_id":"a"}`, "a"},
		{"", `{"number_id":"SECRET1","number_id":"SECRET1"}`, "a"},
		{"", `{"SECRET1":1}`, "a"},
	} {
		_, _, err := CheckConfirm(c[0], []byte(c[1]), c[2])
		if err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("CheckConfirm(%q, %q, %q) = %v", c[0], c[1], c[2], err)
		}
	}
}

// TestCheckConfirmManyKeys: duplicate detection must stay linear, or a body
// of many keys becomes a denial of service.
func TestCheckConfirmManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"number_id":"a"`)
	for i := range 100000 {
		b.WriteString(`,"k`)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(strconv.Itoa(i))
		b.WriteString(`":0`)
	}
	b.WriteString("}")
	if _, _, err := CheckConfirm("", []byte(b.String()), "a"); err != nil {
		t.Fatalf("CheckConfirm of 100000 distinct keys: %v", err)
	}
}

func FuzzCheckConfirm(f *testing.F) {
	for _, s := range []struct{ q, body, h string }{
		{"", `{"number_id":"n-1","order_id":"o"}`, "n-1"}, // accepted
		{"", `{"number_id":"a","number_id":"b"}`, "a"},    // duplicate
		{"", `{"number_id":"a","Number_Id":"b"}`, "a"},    // folded duplicate
		{"", `{"number\u005fid":"a","number_id":"a"}`, "a"},
		{"", `{"number_id":"\ud800"}`, "\ufffd"}, // lone surrogate
		{"", "\xef\xbb\xbf{}", ""},               // BOM
		{"", `{"number_id":"a"} x`, "a"},         // trailing data
		{"x=1", `{"number_id":"a"}`, "a"},        // query
		{"", `[]`, ""},
	} {
		f.Add(s.q, []byte(s.body), s.h)
	}
	f.Fuzz(func(t *testing.T, q string, body []byte, h string) {
		num, ord, err := CheckConfirm(q, body, h)
		if err != nil {
			if num != "" || ord != "" || err.Status != 400 && err.Status != 428 {
				t.Fatalf("CheckConfirm refusal %v with %q, %q", err, num, ord)
			}
			return
		}
		// Accepted: no query, confirmed, and the body's own reading agrees.
		if q != "" || num == "" || num != h {
			t.Fatalf("CheckConfirm(%q, %q, %q) accepted %q", q, body, h, num)
		}
		var m map[string]any
		if e := json.Unmarshal(body, &m); e != nil {
			t.Fatalf("accepted body %q that encoding/json rejects: %v", body, e)
		}
		if m["number_id"] != num {
			t.Fatalf("accepted body %q: number_id %v, CheckConfirm says %q", body, m["number_id"], num)
		}
		for k := range m {
			for k2 := range m {
				if k != k2 && strings.EqualFold(k, k2) {
					t.Fatalf("accepted body %q with keys %q and %q", body, k, k2)
				}
			}
		}
	})
}
