package servertls

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the proxy listener's TLS collectors (docs/metrics-and-alerts.md).
type Metrics struct {
	CertExpiry      *prometheus.GaugeVec   // domain: the certificate's first DNS name
	HandshakeErrors *prometheus.CounterVec // reason: HandshakeReasons
	ACMEFailures    *prometheus.CounterVec // domain (from config), op: obtain, renew
}

// HandshakeReasons are the reason label values of
// faxgate_tls_handshake_errors_total.
var HandshakeReasons = []string{"no_client_cert", "bad_client_cert", "protocol", "other"}

// NewMetrics creates the TLS collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		CertExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faxgate_tls_certificate_expiry_timestamp_seconds",
			Help: "Unix time at which the certificate served on the proxy listener expires, by its first DNS name.",
		}, []string{"domain"}),
		HandshakeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_tls_handshake_errors_total",
			Help: "Failed TLS handshakes on the proxy listener, by reason (no_client_cert, bad_client_cert, protocol, other).",
		}, []string{"reason"}),
		ACMEFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faxgate_tls_acme_failures_total",
			Help: "Failed ACME attempts to obtain or renew the proxy listener's certificate, by configured domain and op (obtain, renew); certmagic retries with backoff.",
		}, []string{"domain", "op"}),
	}
	reg.MustRegister(m.CertExpiry, m.HandshakeErrors, m.ACMEFailures)
	return m
}
