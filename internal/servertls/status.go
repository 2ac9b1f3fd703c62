package servertls

import "time"

// Certificate is one certificate the listener serves, as the status page
// shows it (docs/status-page.md): never its key or body.
type Certificate struct {
	// Domain is the acme domain, or the certificate's first DNS name in
	// mode files (the faxgate_tls_certificate_expiry_timestamp_seconds
	// label).
	Domain string
	// NotAfter is its expiry; zero when no certificate is held for Domain.
	NotAfter time.Time
}

// Certificates lists the certificates served: the one of mode files, or
// one per acme domain (with a zero NotAfter while none is obtained).
func (s *Server) Certificates() []Certificate {
	if s.acme != nil {
		out := make([]Certificate, 0, len(s.acme.domains))
		for _, d := range s.acme.domains {
			c := Certificate{Domain: d}
			if leaf := s.managedLeaf(d); leaf != nil {
				c.NotAfter = leaf.NotAfter
			}
			out = append(out, c)
		}
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hash == "" {
		return nil
	}
	return []Certificate{{Domain: s.domain, NotAfter: s.notAfter}}
}
