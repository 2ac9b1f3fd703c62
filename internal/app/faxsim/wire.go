package faxsim

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/faxgate/faxgate/internal/base/httpjson"
)

// envelope is the upstream's response shape. Message and data are omitted
// when empty because the spec documents successes without them (available
// numbers has no message; contact create and number delete have no data).
type envelope struct {
	Status  int    `json:"status"`
	Message string `json:"message,omitempty"`
	Data    any    `json:"data,omitempty"`
	Meta    any    `json:"meta,omitempty"`
}

// writeOK sends a status 1 envelope with HTTP 200.
func writeOK(w http.ResponseWriter, message string, data any) {
	httpjson.Write(w, http.StatusOK, envelope{Status: 1, Message: message, Data: data})
}

// writeFailure sends a status 0 envelope.
func writeFailure(w http.ResponseWriter, code int, message string) {
	httpjson.Write(w, code, envelope{Status: 0, Message: message})
}

// Messages shared by every JSON endpoint. The real API's answer to bad JSON is
// not documented; a 400 in the usual envelope is what a client can handle.
const (
	msgMalformedJSON = "The request body is not valid JSON."
	msgNotObject     = "The request body must be a JSON object."
)

// object is a decoded JSON request body, each member kept raw so endpoints
// can check types the way the upstream's validator does.
type object map[string]json.RawMessage

var errMalformedJSON = errors.New("malformed JSON")

// decodeObject parses a JSON body. An empty body is the empty object, as a
// form-style framework treats it; isObject is false for valid JSON of another
// kind (array, string, ...).
func decodeObject(body []byte) (obj object, isObject bool, err error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return object{}, true, nil
	}
	if trimmed[0] != '{' {
		if !json.Valid(trimmed) {
			return nil, false, errMalformedJSON
		}
		return nil, false, nil
	}
	// One pass for objects: multi-MB fax bodies make a separate json.Valid
	// noticeable. Any error decoding '{...' into this map is a syntax error.
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return nil, false, errMalformedJSON
	}
	return obj, true, nil
}

// jsonObject decodes the body of an envelope-style endpoint, answering the
// request itself when it cannot be decoded.
func jsonObject(w http.ResponseWriter, c *call) (object, bool) {
	obj, isObject, err := decodeObject(c.body)
	switch {
	case err != nil:
		writeFailure(w, http.StatusBadRequest, msgMalformedJSON)
		return nil, false
	case !isObject:
		writeFailure(w, http.StatusUnprocessableEntity, msgNotObject)
		return nil, false
	}
	return obj, true
}

// presence says whether a member is there, and of the expected type.
type presence int

const (
	absent    presence = iota // missing, null, or a blank string
	wrongType                 // present but not the expected JSON type
	present
)

// str reads a string member. Like the upstream's "required" rule, null and
// blank strings count as absent.
func (o object) str(name string) (string, presence) {
	raw, ok := o[name]
	if !ok || jsonKind(raw) == 'n' {
		return "", absent
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return "", wrongType
	}
	if strings.TrimSpace(v) == "" {
		return "", absent
	}
	return v, present
}

// boolean reads a boolean member; 0 and 1 are accepted as the upstream's
// framework accepts them.
func (o object) boolean(name string) (bool, presence) {
	raw, ok := o[name]
	if !ok || jsonKind(raw) == 'n' {
		return false, absent
	}
	switch string(bytes.TrimSpace(raw)) {
	case "true", "1":
		return true, present
	case "false", "0":
		return false, present
	}
	return false, wrongType
}

// jsonKind classifies a valid JSON value by its first byte: '"' string,
// '{' object, '[' array, 't'/'f' boolean, 'n' null, '0' number.
func jsonKind(raw json.RawMessage) byte {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 {
		return 0
	}
	switch c := v[0]; c {
	case '"', '{', '[', 't', 'f', 'n':
		return c
	}
	return '0'
}

// isInteger reports whether a JSON number has no fraction or exponent.
func isInteger(raw json.RawMessage) bool {
	v := bytes.TrimSpace(raw)
	return jsonKind(v) == '0' && !bytes.ContainsAny(v, ".eE")
}

// words turns a member name into the words the upstream's messages use
// ("country_code" -> "country code").
func words(name string) string { return strings.ReplaceAll(name, "_", " ") }

// msgRequired follows the documented pattern: the field name in words, then
// "field is required".
// requiredStr returns the string field name, or answers 422 with the
// upstream's validation message when it is missing or not a string.
func requiredStr(w http.ResponseWriter, obj object, name string) (string, bool) {
	v, p := obj.str(name)
	switch p {
	case absent:
		writeFailure(w, http.StatusUnprocessableEntity, msgRequired(name))
		return "", false
	case wrongType:
		writeFailure(w, http.StatusUnprocessableEntity, msgString(name))
		return "", false
	}
	return v, true
}

func msgRequired(name string) string { return "The " + words(name) + " field is required." }

func msgString(name string) string { return "The " + words(name) + " must be a string." }

// randomID returns n random bytes, base64url-encoded: opaque identifiers and
// tokens that are safe in URLs and JSON without escaping.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}
