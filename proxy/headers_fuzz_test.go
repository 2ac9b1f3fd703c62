package proxy

import (
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/base/ascii"
	"github.com/faxgate/faxgate/policy/routetable"
)

// FuzzOutgoingHeader: whatever the configured spelling of the identity
// header and whatever a caller's header names and Connection value, the
// header sent upstream holds no spelling of the identity header, no header
// the caller's Connection names, no caller credential, and no
// X-Forwarded-* in any spelling. Header names arrive as net/http's server
// leaves them: canonical, but for underscores.
func FuzzOutgoingHeader(f *testing.F) {
	// Seeds: the identity header configured and sent in every case and
	// with underscores; Connection naming the identity header, the
	// checked Content-Type and Content-Encoding, in lists and odd spacing.
	f.Add("X-Faxgate-Caller", "X-Faxgate-Caller", "close")
	f.Add("x-faxgate-caller", "X-Faxgate-Caller", "")
	f.Add("X-FAXGATE-CALLER", "x_faxgate_caller", "")
	f.Add("x-FaXgAtE-cAlLeR", "X_Faxgate_Caller", "keep-alive")
	f.Add("x_faxgate_caller", "X-Faxgate-Caller", "")
	f.Add("X-Caller", "X-Faxgate-Confirm", "close, X-Caller")
	f.Add("X-Caller", "Content-Type", "close, content-type")
	f.Add("X-Caller", "Content-Encoding", " Content_Encoding ,close")
	f.Add("X-Caller", "X_Forwarded_For", "")
	f.Add("X-Caller", "Authorization", "")
	f.Add("X-Caller", "X_Http_Method_Override", "")
	f.Fuzz(func(t *testing.T, configured, sent, connection string) {
		if !ascii.IsToken(configured) || !ascii.IsToken(sent) {
			return
		}
		in := http.Header{}
		key := textproto.CanonicalMIMEHeaderKey(sent)
		in[key] = []string{"v"}
		if connection != "" {
			in["Connection"] = []string{connection}
		}
		identity := routetable.FoldedHeaderName(configured)
		out := outgoingHeader(in, identity, []string{"id"})
		named := map[string]bool{}
		for name := range strings.SplitSeq(connection, ",") {
			named[textproto.CanonicalMIMEHeaderKey(textproto.TrimString(name))] = true
		}
		for k := range out {
			folded := routetable.FoldedHeaderName(k)
			switch {
			case folded == identity:
				t.Fatalf("identity header %q (configured %q) forwarded as %q", sent, configured, k)
			case named[k]:
				t.Fatalf("%q forwarded although Connection %q names it", k, connection)
			case strings.HasPrefix(folded, "X-Forwarded-"), folded == "Authorization", folded == "Connection":
				t.Fatalf("%q forwarded", k)
			}
		}
	})
}
