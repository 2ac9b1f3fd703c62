package policy

import (
	"bytes"
	"encoding/json"
	"strings"
)

// routeNumbersDelete is the built-in route whose audit line always names
// the number it deleted.
const routeNumbersDelete = "numbers.delete"

// AuditCarriesIDs reports whether the audit line of a request to route,
// whose Base decision is base, carries the number_id and order_id of its
// body. Only a sensitive route has an audit line. Its IDs are what an
// auditor needs to know which number went: numbers.delete's line carries
// them even when the route is not in policy.confirm, and so does the line
// of every confirmed route, whose check reads them anyway
// (docs/logs.md, Audit lines).
func AuditCarriesIDs(route string, base Decision) bool {
	return base.Sensitive && (route == routeNumbersDelete || base.Confirm)
}

// AuditIDs reads number_id and order_id from body for the audit line, as
// leniently as a security review needs: whenever body starts as a readable
// JSON object, whether or not CheckConfirm would accept it. Values that are
// JSON strings or numbers are returned as their text; a key that appears
// more than once with different values yields every distinct value, joined
// by commas, because a denied request that tried to be ambiguous is exactly
// what the reader of the audit log must see. Reading stops at the first
// malformed byte, keeping what came before.
func AuditIDs(body []byte) (numberID, orderID string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", ""
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case json.Number:
			s = x.String()
		default:
			continue
		}
		switch key {
		case "number_id":
			numberID = addDistinct(numberID, s)
		case "order_id":
			orderID = addDistinct(orderID, s)
		}
	}
	return numberID, orderID
}

func addDistinct(list, v string) string {
	if list == "" {
		return v
	}
	for _, x := range strings.Split(list, ",") {
		if x == v {
			return list
		}
	}
	return list + "," + v
}
