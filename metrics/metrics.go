// Package metrics holds the label helpers every package that counts
// requests shares (docs/metrics-and-alerts.md): the bounded label values of
// an HTTP method and a status code. The collectors themselves belong to the
// packages whose behaviour they count (proxy, tokencache, policy/limit,
// internal/servertls, internal/app/gateway), each registered on the
// registry the assembler owns, never on the global default one.
package metrics

import (
	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy/routetable"
)

// Method maps an HTTP method to its label value: one of the methods the
// gateway forwards (routetable.Methods), or "other", so a caller cannot mint
// label values.
func Method(m string) string {
	if routetable.IsMethod(m) {
		return m
	}
	return "other"
}

// Code is the label value for an HTTP status code, without allocating;
// anything outside 0 to 599 is "other", so the label's values stay bounded.
func Code(status int) string {
	if status >= 0 && status < 600 {
		return ascii.Itoa(int64(status))
	}
	return "other"
}
