// Package httpjson writes JSON answers: the admin endpoints' and the
// simulator's.
package httpjson

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// Write sends v as a JSON body with the given status. The body is encoded
// before anything is sent, so a value that cannot be encoded gets a 500
// with a short JSON message rather than half a body. HTML characters are
// not escaped: phone numbers and messages stay readable.
func Write(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"status":0,"message":"cannot encode the response"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
