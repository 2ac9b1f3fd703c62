package identity

import (
	"errors"
	"strings"
)

// XFCCElement is one element of an X-Forwarded-Client-Cert header: the
// client certificate one proxy saw. Envoy and Istio append one element per
// hop, so the last element is the one added by the nearest proxy.
type XFCCElement struct {
	By      string   // URI SAN of the proxy's own certificate
	Hash    string   // SHA-256 of the client certificate, hex
	Subject string   // the client certificate's subject DN
	URI     string   // the client certificate's URI SAN (a SPIFFE ID under Istio)
	DNS     []string // the client certificate's DNS SANs; the key may repeat
}

var (
	errXFCCEmpty     = errors.New("xfcc: empty element")
	errXFCCPair      = errors.New("xfcc: pair without key=value")
	errXFCCQuote     = errors.New("xfcc: unterminated quoted value")
	errXFCCAfter     = errors.New("xfcc: text after a quoted value")
	errXFCCDuplicate = errors.New("xfcc: key repeated in one element")
)

// ParseXFCC parses an Envoy/Istio X-Forwarded-Client-Cert value into its
// elements, in header order. Elements are separated by ",", pairs by ";",
// keys are case-insensitive, and a value may be double-quoted so that it can
// hold "," ";" and "=", with \" and \\ standing for a quote and a backslash
// (any other backslash is kept as is, because subject DNs use backslash
// escapes of their own).
//
// Unknown keys (Cert, Chain ...) are skipped. A key other than DNS that
// appears twice in one element is an error: two URIs for one certificate
// would leave it open which one names the caller.
func ParseXFCC(v string) ([]XFCCElement, error) {
	var out []XFCCElement
	var el XFCCElement
	var seen [4]bool // By, Hash, Subject, URI
	pairs := 0
	i := 0
	for {
		i = skipOWS(v, i)
		// key
		k := i
		for i < len(v) && v[i] != '=' && v[i] != ';' && v[i] != ',' {
			i++
		}
		key := strings.TrimRight(v[k:i], " \t")
		if i >= len(v) || v[i] != '=' {
			if key == "" && pairs == 0 && (i >= len(v) || v[i] == ',') {
				return nil, errXFCCEmpty
			}
			return nil, errXFCCPair
		}
		if key == "" {
			return nil, errXFCCPair
		}
		i = skipOWS(v, i+1)
		// value
		var val string
		if i < len(v) && v[i] == '"' {
			var ok bool
			val, i, ok = unquoteXFCC(v, i+1)
			if !ok {
				return nil, errXFCCQuote
			}
			i = skipOWS(v, i)
			if i < len(v) && v[i] != ';' && v[i] != ',' {
				return nil, errXFCCAfter
			}
		} else {
			s := i
			for i < len(v) && v[i] != ';' && v[i] != ',' {
				if v[i] == '"' {
					return nil, errXFCCQuote
				}
				i++
			}
			val = strings.TrimRight(v[s:i], " \t")
		}
		pairs++
		slot := -1
		switch {
		case strings.EqualFold(key, "By"):
			slot, el.By = 0, val
		case strings.EqualFold(key, "Hash"):
			slot, el.Hash = 1, val
		case strings.EqualFold(key, "Subject"):
			slot, el.Subject = 2, val
		case strings.EqualFold(key, "URI"):
			slot, el.URI = 3, val
		case strings.EqualFold(key, "DNS"):
			el.DNS = append(el.DNS, val)
		}
		if slot >= 0 {
			if seen[slot] {
				return nil, errXFCCDuplicate
			}
			seen[slot] = true
		}
		if i >= len(v) {
			return append(out, el), nil
		}
		if v[i] == ',' {
			out = append(out, el)
			el, seen, pairs = XFCCElement{}, [4]bool{}, 0
		}
		i++
	}
}

// unquoteXFCC reads a quoted value starting after its opening quote at i and
// returns the value and the index after the closing quote.
func unquoteXFCC(v string, i int) (string, int, bool) {
	start := i
	simple := true
	for ; i < len(v); i++ {
		switch v[i] {
		case '"':
			if simple {
				return v[start:i], i + 1, true
			}
			return unescapeXFCC(v[start:i]), i + 1, true
		case '\\':
			if i+1 < len(v) && (v[i+1] == '"' || v[i+1] == '\\') {
				simple = false
				i++
			}
		}
	}
	return "", i, false
}

func unescapeXFCC(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func skipOWS(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}
