package identity

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseXFCC(t *testing.T) {
	const hash = "468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688"
	for _, tc := range []struct {
		name string
		in   string
		want []XFCCElement
	}{
		{"istio", "By=spiffe://cluster.local/ns/default/sa/gw;Hash=" + hash + `;Subject="";URI=spiffe://cluster.local/ns/default/sa/intake`,
			[]XFCCElement{{By: "spiffe://cluster.local/ns/default/sa/gw", Hash: hash, URI: "spiffe://cluster.local/ns/default/sa/intake"}}},
		{"envoy docs", "By=http://frontend.lyft.com;Hash=" + hash + `;Subject="/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client";URI=http://testclient.lyft.com;DNS=lyft.com;DNS=www.lyft.com`,
			[]XFCCElement{{By: "http://frontend.lyft.com", Hash: hash, Subject: "/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client", URI: "http://testclient.lyft.com", DNS: []string{"lyft.com", "www.lyft.com"}}}},
		{"two elements", "By=http://frontend.lyft.com;URI=http://testclient.lyft.com,By=http://backend.lyft.com;URI=http://frontend.lyft.com",
			[]XFCCElement{{By: "http://frontend.lyft.com", URI: "http://testclient.lyft.com"}, {By: "http://backend.lyft.com", URI: "http://frontend.lyft.com"}}},
		{"joined lines with blanks", "URI=a , URI=b,\tURI=c",
			[]XFCCElement{{URI: "a"}, {URI: "b"}, {URI: "c"}}},
		{"quoted comma and semicolon", `Subject="CN=a,O=b;c=d";URI=x`,
			[]XFCCElement{{Subject: "CN=a,O=b;c=d", URI: "x"}}},
		{"quoted URI with comma", `URI="spiffe://a/b,URI=spiffe://evil"`,
			[]XFCCElement{{URI: "spiffe://a/b,URI=spiffe://evil"}}},
		{"escaped quotes", `Subject="CN=\"quoted\", O=x";URI=x`,
			[]XFCCElement{{Subject: `CN="quoted", O=x`, URI: "x"}}},
		{"escaped backslash", `Subject="a\\";URI=x`,
			[]XFCCElement{{Subject: `a\`, URI: "x"}}},
		{"DN backslash kept", `Subject="CN=Doe\, John"`,
			[]XFCCElement{{Subject: `CN=Doe\, John`}}},
		{"keys any case", "uri=x;BY=y;hAsH=z;dns=d",
			[]XFCCElement{{URI: "x", By: "y", Hash: "z", DNS: []string{"d"}}}},
		{"unknown keys skipped", `Cert="-----BEGIN%20CERTIFICATE-----%0A";Chain="x";URI=u`,
			[]XFCCElement{{URI: "u"}}},
		{"empty values", `By=;URI=`, []XFCCElement{{}}},
		{"equals in unquoted value", "URI=spiffe://a/b?c=d",
			[]XFCCElement{{URI: "spiffe://a/b?c=d"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseXFCC(tc.in)
			if err != nil {
				t.Fatalf("ParseXFCC(%q) error %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseXFCC(%q)\n got %#v\nwant %#v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseXFCCMalformed(t *testing.T) {
	for _, in := range []string{
		"",
		" ",
		",",
		"URI=x,",
		",URI=x",
		"URI=x,,URI=y",
		"URI=x;",
		";URI=x",
		"URI",
		"URI=x;DNS",
		"=x",
		`URI="x`,
		`URI="x\"`,
		`URI="x"y`,
		`URI=a"b"`,
		"URI=x;URI=y",
		"URI=x;uri=y",
		"By=a;By=b",
		"Hash=a;Hash=b",
		"Subject=a;Subject=b",
	} {
		if got, err := ParseXFCC(in); err == nil {
			t.Errorf("ParseXFCC(%q) = %#v, want error", in, got)
		}
	}
}

// encodeXFCC writes elements back, every value quoted, so that
// ParseXFCC(encodeXFCC(els)) can be checked to give els again.
func encodeXFCC(els []XFCCElement) string {
	q := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	var b strings.Builder
	for i, e := range els {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`By="` + q.Replace(e.By) + `";Hash="` + q.Replace(e.Hash) +
			`";Subject="` + q.Replace(e.Subject) + `";URI="` + q.Replace(e.URI) + `"`)
		for _, d := range e.DNS {
			b.WriteString(`;DNS="` + q.Replace(d) + `"`)
		}
	}
	return b.String()
}

func FuzzParseXFCC(f *testing.F) {
	for _, s := range []string{
		// Istio sidecar
		"By=spiffe://cluster.local/ns/default/sa/gw;Hash=abc;Subject=\"\";URI=spiffe://cluster.local/ns/default/sa/intake",
		// two hops
		"URI=spiffe://a,URI=spiffe://b",
		// quoted separators and escapes
		`Subject="CN=\"x\",O=y;z";URI="a,b";DNS=c;DNS="d"`,
		// backslash before the closing quote
		`Subject="a\\";URI=x`,
		// unterminated quote
		`URI="x`,
		// duplicate key
		"URI=x;URI=y",
		// empty element
		"URI=x,,URI=y",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		els, err := ParseXFCC(in)
		if err != nil {
			if els != nil {
				t.Fatalf("ParseXFCC(%q) = %#v beside error", in, els)
			}
			return
		}
		if len(els) == 0 {
			t.Fatalf("ParseXFCC(%q) succeeded with no element", in)
		}
		if n := strings.Count(in, ","); len(els) > n+1 {
			t.Fatalf("ParseXFCC(%q): %d elements from %d commas", in, len(els), n)
		}
		enc := encodeXFCC(els)
		again, err := ParseXFCC(enc)
		if err != nil || !reflect.DeepEqual(again, els) {
			t.Fatalf("round trip of %q:\n first %#v\n enc %q\nagain %#v, %v", in, els, enc, again, err)
		}
	})
}
