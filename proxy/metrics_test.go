package proxy_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faxgate/faxgate/proxy"
)

func TestHistogramsCoverMillisecondsToTheUpstreamTimeout(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := proxy.NewMetrics(reg)
	m.RequestDuration.WithLabelValues("a", "b").Observe(0.0005)
	m.UpstreamDuration.WithLabelValues("b").Observe(0.0005)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetType().String() != "HISTOGRAM" {
			continue
		}
		b := mf.GetMetric()[0].GetHistogram().GetBucket()
		if len(b) == 0 || b[0].GetUpperBound() > 0.001 || b[len(b)-1].GetUpperBound() < 60 {
			t.Errorf("%s buckets span %v..%v, want at most 1ms .. at least 60s (the default upstream.timeout)",
				mf.GetName(), b[0].GetUpperBound(), b[len(b)-1].GetUpperBound())
		}
	}
}
