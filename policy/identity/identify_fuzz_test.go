package identity

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/faxgate/faxgate/internal/config"
)

// FuzzIdentify drives the whole identity decision with arbitrary identity
// header and X-Forwarded-Client-Cert values from trusted and untrusted peers.
// Properties: never panics; from an untrusted peer the headers change
// nothing (the answer equals the one without them); a caller named through
// the identity header is one whose header_values holds the exact value; a
// caller named through XFCC lists the URI of the last element in spiffe_ids.
func FuzzIdentify(f *testing.F) {
	id, err := New(config.Callers{
		IdentityHeader: "X-Faxgate-Caller",
		TrustedProxies: []string{"10.0.0.0/8"},
		Unidentified:   "deny",
		List: []config.Caller{
			{Name: "ops", HeaderValues: []string{"ops"}, SpiffeIDs: []string{"spiffe://cluster.local/ns/ops/sa/ops"}},
			{Name: "intake", CIDRs: []string{"10.1.0.0/16", "192.168.0.0/16"}},
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	// Seeds: plain values, lookalikes, XFCC with several elements and quotes.
	f.Add("ops", "", "10.1.2.3:1234")
	f.Add("ops", "", "192.168.1.1:1234") // untrusted peer: header ignored
	f.Add("OPS", "", "10.1.2.3:1")
	f.Add("ops ", "", "10.2.0.1:1")
	f.Add("", `By=spiffe://x;URI=spiffe://cluster.local/ns/ops/sa/ops`, "10.9.9.9:1")
	f.Add("", `URI=spiffe://cluster.local/ns/ops/sa/ops,URI=spiffe://evil/x`, "10.9.9.9:1")
	f.Add("", `URI="spiffe://cluster.local/ns/ops/sa/ops";Subject="CN=a,O=\"b\""`, "10.9.9.9:1")
	f.Add("\x00ops", "URI=", "[::ffff:10.1.0.1]:1")
	f.Fuzz(func(t *testing.T, header, xfcc, peer string) {
		r := &http.Request{Header: http.Header{}, RemoteAddr: peer}
		bare := &http.Request{Header: http.Header{}, RemoteAddr: peer}
		if header != "" {
			r.Header.Set("X-Faxgate-Caller", header)
		}
		if xfcc != "" {
			r.Header.Set("X-Forwarded-Client-Cert", xfcc)
		}
		name, how, ok := id.Identify(r)
		bname, bhow, bok := id.Identify(bare)
		if !id.isTrustedPeer(peer) && (name != bname || how != bhow || ok != bok) {
			t.Fatalf("untrusted peer %q: headers changed identity from %q/%s to %q/%s", peer, bname, bhow, name, how)
		}
		switch how {
		case ByHeader:
			// Only RFC 9110 optional whitespace around the value is ignored.
			if name != "ops" || strings.Trim(header, " \t") != "ops" {
				t.Fatalf("header %q identified %q", header, name)
			}
		case ByXFCC:
			els, err := ParseXFCC(xfcc)
			if err != nil || len(els) == 0 || els[len(els)-1].URI != "spiffe://cluster.local/ns/ops/sa/ops" || name != "ops" {
				t.Fatalf("XFCC %q identified %q", xfcc, name)
			}
		}
	})
}

// isTrustedPeer mirrors Identify's reading of RemoteAddr.
func (id *Identifier) isTrustedPeer(remote string) bool {
	p, err := netip.ParseAddrPort(remote)
	return err == nil && id.isTrusted(p.Addr().Unmap().WithZone(""))
}
