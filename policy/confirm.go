package policy

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/faxgate/faxgate/policy/route"
	"github.com/faxgate/faxgate/policy/routetable"
)

// ConfirmHeader is routetable.ConfirmHeader, named here for the proxy, which
// reads it for CheckConfirm and never forwards it.
const ConfirmHeader = routetable.ConfirmHeader

// CheckConfirm enforces policy.confirm for numbers.delete-like routes.
//
// The request must have no query string (an upstream could take number_id
// from there), and the body must be exactly one JSON object whose top-level
// keys are unique even after Unicode case folding: upstream JSON decoders
// disagree on which duplicate wins and some match keys case-insensitively,
// so a body the gateway reads one way must not be read another way upstream.
// number_id must be a non-empty string, order_id a string when present, and
// header (the X-Faxgate-Confirm value; the proxy passes "" when the header is
// absent or repeated) must equal number_id exactly.
//
// It returns number_id and order_id (empty when absent) for the audit line.
// A malformed request is 400 invalid_request; a missing or different
// confirmation is 428 confirmation_required.
func CheckConfirm(rawQuery string, body []byte, header string) (numberID, orderID string, err *route.Error) {
	if rawQuery != "" {
		return "", "", invalidRequest("a confirmed route takes no query string")
	}
	// encoding/json would silently replace invalid UTF-8 with U+FFFD and
	// would reject a BOM only with a confusing message; say it plainly.
	if bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) {
		return "", "", invalidRequest("body starts with a byte order mark")
	}
	if !utf8.Valid(body) {
		return "", "", invalidRequest("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, e := dec.Token(); e != nil || tok != json.Delim('{') {
		return "", "", invalidRequest("body must be one JSON object")
	}
	haveNumber := false
	seen := map[string]bool{}
	for dec.More() {
		tok, e := dec.Token()
		if e != nil {
			return "", "", invalidRequest("body is not valid JSON")
		}
		key, _ := tok.(string) // object keys are always strings
		// The API's keys are plain ASCII. Anything else may be read as
		// number_id by an upstream runtime whose folding differs from Go's
		// ("number_ıd" with a dotless i under Java's equalsIgnoreCase,
		// "number_id\u0000" under a NUL-terminated decoder): refuse it.
		if !printableASCII(key) {
			return "", "", invalidRequest("body has a key that is not printable ASCII")
		}
		// Decoded keys are compared, so "number\u005fid" is number_id.
		folded := foldKey(key)
		if seen[folded] {
			return "", "", invalidRequest("body has a duplicate key (letter case ignored)")
		}
		seen[folded] = true
		var raw json.RawMessage
		if e := dec.Decode(&raw); e != nil {
			return "", "", invalidRequest("body is not valid JSON")
		}
		switch key {
		case "number_id":
			s, ok := jsonString(raw)
			if !ok || s == "" {
				return "", "", invalidRequest("number_id must be a non-empty string")
			}
			numberID, haveNumber = s, true
		case "order_id":
			s, ok := jsonString(raw)
			if !ok {
				return "", "", invalidRequest("order_id must be a string")
			}
			orderID = s
		}
	}
	if tok, e := dec.Token(); e != nil || tok != json.Delim('}') {
		return "", "", invalidRequest("body is not valid JSON")
	}
	if _, e := dec.Token(); e != io.EOF {
		return "", "", invalidRequest("body has data after the JSON object")
	}
	if !haveNumber {
		return "", "", invalidRequest("number_id must be a non-empty string")
	}
	if header == "" {
		return "", "", confirmationRequired("repeat the body's number_id in " + ConfirmHeader)
	}
	if header != numberID {
		return "", "", confirmationRequired(ConfirmHeader + " does not match the body's number_id")
	}
	return numberID, orderID, nil
}

// jsonString decodes raw if it is a JSON string. A string holding U+FFFD is
// refused: encoding/json turns an unpaired surrogate escape ("\ud800") into
// it, so the gateway's reading would differ from the upstream's.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil || strings.ContainsRune(s, utf8.RuneError) {
		return "", false
	}
	return s, true
}

// printableASCII reports whether s holds only visible ASCII (0x21-0x7E).
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// foldKey maps s to a representative of its case-folding class: two keys
// are strings.EqualFold exactly when their foldKeys are equal. Each rune
// becomes the smallest rune of its unicode.SimpleFold orbit, so "K", "k"
// and the Kelvin sign all become "K". A map of foldKeys finds duplicates in
// linear time where comparing every pair with EqualFold would be quadratic
// in the number of keys an attacker sends.
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b.WriteRune(min)
	}
	return b.String()
}
