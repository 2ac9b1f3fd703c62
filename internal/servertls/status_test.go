package servertls_test

import (
	"testing"

	"github.com/faxgate/faxgate/internal/testing/tlstest"
)

// Certificates is what the status page lists (docs/status-page.md): the
// certificate served, by its first DNS name, with its expiry, following a
// rotation.
func TestCertificatesFollowTheFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	a := ca.Server(t, "a.faxgate.test")
	f := start(t, a)
	if got := f.srv.Certificates(); len(got) != 1 || got[0].Domain != "a.faxgate.test" || !got[0].NotAfter.Equal(a.Leaf.NotAfter) {
		t.Fatalf("certificates %+v, want a.faxgate.test until %v", got, a.Leaf.NotAfter)
	}
	b := ca.Server(t, "b.faxgate.test")
	f.swap(b.CertPEM, b.KeyPEM)
	f.tick()
	if got := f.srv.Certificates(); len(got) != 1 || got[0].Domain != "b.faxgate.test" || !got[0].NotAfter.Equal(b.Leaf.NotAfter) {
		t.Fatalf("after the rotation: certificates %+v, want b.faxgate.test", got)
	}
}
