//go:build alerting

package alerting

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/faxgate/faxgate/internal/testing/eventually"
)

// fireWithin bounds how long an alert may take to fire once its cause is
// there: a few scrapes and evaluations (1 s each), the 5 s for: of the
// shortened rules, and Alertmanager's 1 s group_wait.
const fireWithin = 45 * time.Second

// TestAlertsFireAndRoute proves docs/metrics-and-alerts.md's promises on a
// real Prometheus and Alertmanager, with the chart's rules (for: shortened to
// 5s), for two releases of one name (faxgate) in two namespaces, A and B:
// the first denied numbers.delete fires FaxgateSensitiveRouteDenied (info);
// B's rejected API key fires FaxgateAPIKeyRejected (critical) for B only; B
// with every replica killed fires FaxgateAbsent for B alone (not also
// FaxgateDown: one outage, one page) while A, up, has neither; and
// Alertmanager delivers each release's alerts to its own namespace's
// receiver only.
func TestAlertsFireAndRoute(t *testing.T) {
	s := startStack(t, stackOptions{shortFor: true, keyB: badKey})
	a, b := s.releases[0], s.releases[1] // one name, two namespaces
	jobA := map[string]string{"job": a.fullname, "namespace": a.namespace}
	jobB := map[string]string{"job": b.fullname, "namespace": b.namespace}

	// Every replica scraped a few times, and A's denial counter there at 0
	// before any denial (docs/metrics-and-alerts.md: series exist at 0 from the start).
	eventually.EventuallyErr(t, 30*time.Second, "every target scraped 3 times", func() error {
		res, err := s.prom.query(`count_over_time(up[1m]) >= 3`, time.Time{})
		if err != nil {
			return err
		}
		if len(res) != 4 {
			return fmt.Errorf("%d of 4 targets scraped 3 times", len(res))
		}
		return nil
	})
	deniedSel := fmt.Sprintf(`faxgate_denied_total{job=%q,namespace=%q,route="numbers.delete",caller="intake"}`, a.fullname, a.namespace)
	res, err := s.prom.query(deniedSel, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%s: %d series before the first denial, want one per replica at 0: %v", deniedSel, len(res), res)
	}
	for _, r := range res {
		if v := r.Value[1]; v != "0" {
			t.Fatalf("%s on %s is %v before the first denial, want 0", deniedSel, r.Metric["pod"], v)
		}
	}

	t.Run("first denied delete fires FaxgateSensitiveRouteDenied", func(t *testing.T) {
		denied := time.Now()
		req, _ := http.NewRequest(http.MethodPost, a.replicas[0].url+"/v1/numbers/delete",
			strings.NewReader(`{"number_id":"num_1001","order_id":"ord_5001"}`))
		req.Header.Set("X-Faxgate-Caller", "intake")
		req.Header.Set("X-Faxgate-Confirm", "num_1001")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("intake's numbers.delete: HTTP %d, want 403", resp.StatusCode)
		}
		want := map[string]string{"job": a.fullname, "namespace": a.namespace, "caller": "intake",
			"route": "numbers.delete", "severity": "info"}
		waitFiring(t, s.prom, "FaxgateSensitiveRouteDenied", want)
		t.Logf("FaxgateSensitiveRouteDenied firing %s after the one denial", time.Since(denied).Round(time.Second))
	})

	t.Run("rejected API key fires FaxgateAPIKeyRejected for B only", func(t *testing.T) {
		waitFiring(t, s.prom, "FaxgateAPIKeyRejected", merge(jobB, map[string]string{"severity": "critical"}))
		alerts, err := s.prom.alerts()
		if err != nil {
			t.Fatal(err)
		}
		if got := find(alerts, "FaxgateAPIKeyRejected", jobA); len(got) > 0 {
			t.Errorf("FaxgateAPIKeyRejected active for release A, whose key is good: %v", got)
		}
	})

	t.Run("B killed fires FaxgateAbsent for B alone, nothing for A", func(t *testing.T) {
		for _, rep := range b.replicas {
			rep.p.kill()
		}
		killed := time.Now()
		eventually.EventuallyErr(t, fireWithin, "FaxgateAbsent firing for B after its replicas were killed", func() error {
			// Each release's rules file makes its own, and each alert
			// carries its release's job and namespace.
			alerts, err := s.prom.ruleAlerts()
			if err != nil {
				t.Fatal(err)
			}
			// One outage, one page: FaxgateAbsent, never FaxgateDown too.
			// A shares B's release name and job: its rules stay silent.
			var absentB bool
			for _, al := range alerts {
				name := al.Labels["alertname"]
				if name != "FaxgateDown" && name != "FaxgateAbsent" {
					continue
				}
				switch {
				case al.File == s.ruleFile(a) || al.Labels["namespace"] == a.namespace:
					t.Fatalf("%s active for release A, whose replicas all run: %v", name, al)
				case name == "FaxgateDown":
					t.Fatalf("FaxgateDown active for B beside FaxgateAbsent: two pages for one outage: %v", al)
				case al.State == "firing" && matches(al.Labels, merge(jobB, map[string]string{"severity": "critical"})):
					absentB = true
				}
			}
			if !absentB {
				return fmt.Errorf("active alerts:%s", ruleAlertLines(alerts))
			}
			t.Logf("FaxgateAbsent firing for B %s after its replicas were killed", time.Since(killed).Round(time.Second))
			return nil
		})
	})

	t.Run("every alert names its release", func(t *testing.T) {
		alerts, err := s.prom.ruleAlerts()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, al := range alerts {
			r := a
			if al.File == s.ruleFile(b) {
				r = b
			}
			name := al.Labels["alertname"]
			scoped := al.Labels["job"] == r.fullname && al.Labels["namespace"] == r.namespace
			why, known := knownUnscoped[name]
			switch {
			case !scoped && !known:
				t.Errorf("%s of release %s does not carry job=%q and namespace=%q: %v", name, r.name, r.fullname, r.namespace, al)
			case !scoped && !seen[name]:
				t.Logf("\n\n*** KNOWN GAP: %s carries no job or namespace (%s): %v ***\n", name, why, al)
			case scoped && known:
				t.Errorf("%s now carries its release's job and namespace: take it out of knownUnscoped", name)
			}
			seen[name] = true
		}
	})

	t.Run("Alertmanager routes by namespace", func(t *testing.T) {
		hookA, hookB, hookDefault := s.hooks[receiverA], s.hooks[receiverB], s.hooks[receiverDefault]
		withCluster := func(m map[string]string) map[string]string { return merge(m, map[string]string{"cluster": cluster}) }
		eventually.EventuallyErr(t, fireWithin, "deliveries to the namespace receivers", func() error {
			var missing []string
			for _, d := range []struct {
				hook *webhook
				name string
				want map[string]string
			}{
				{hookA, "FaxgateSensitiveRouteDenied", withCluster(jobA)},
				{hookB, "FaxgateAPIKeyRejected", withCluster(jobB)},
				{hookB, "FaxgateAbsent", withCluster(jobB)},
			} {
				if !d.hook.has(d.name, d.want) {
					missing = append(missing, fmt.Sprintf("%s to %s", d.name, d.hook.name))
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("not delivered: %s", strings.Join(missing, ", "))
			}
			return nil
		})
		for _, c := range []struct {
			hook *webhook
			ns   string
		}{{hookA, a.namespace}, {hookB, b.namespace}} {
			for _, al := range c.hook.received() {
				if al.Labels["namespace"] != c.ns {
					t.Errorf("receiver %s got an alert of namespace %q: %v", c.hook.name, al.Labels["namespace"], al.Labels)
				}
			}
		}
		// Only an alert without a namespace falls through to the default
		// receiver, and only a known one.
		for _, al := range hookDefault.received() {
			name := al.Labels["alertname"]
			if _, known := knownUnscoped[name]; !known {
				t.Errorf("%s reached the default receiver, not its namespace's: %v", name, al.Labels)
			}
		}
	})
}

// waitFiring waits until exactly one alert named name with the labels want
// is firing.
func waitFiring(t *testing.T, p *promAPI, name string, want map[string]string) {
	t.Helper()
	eventually.EventuallyErr(t, fireWithin, fmt.Sprintf("%s with %v firing", name, want), func() error {
		alerts, err := p.alerts()
		if err != nil {
			t.Fatal(err)
		}
		got := find(alerts, name, want)
		if len(got) > 1 {
			t.Fatalf("%s: %d alerts with %v, want one:%s", name, len(got), want, alertLines(got))
		}
		if len(got) == 1 && got[0].State == "firing" {
			return nil
		}
		return fmt.Errorf("active alerts:%s", alertLines(alerts))
	})
}

func alertLines(alerts []promAlert) string {
	if len(alerts) == 0 {
		return " none"
	}
	out := make([]string, len(alerts))
	for i, a := range alerts {
		out[i] = a.String()
	}
	return joinLines(out)
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func ruleAlertLines(alerts []ruleAlert) string {
	out := make([]promAlert, len(alerts))
	for i, a := range alerts {
		out[i] = a.promAlert
		out[i].Labels = merge(a.Labels, map[string]string{"rules_file": filepath.Base(a.File)})
	}
	return alertLines(out)
}

// ruleFile is the rules file of release r, as Prometheus names it.
func (s *stack) ruleFile(r *release) string { return filepath.Join(s.dir, r.namespace+".rules.yaml") }

// knownUnscoped lists the alerts that do not carry their release's job and
// namespace (docs/metrics-and-alerts.md: every alert keeps them), each with
// the reason. It is empty: FaxgateAbsent, whose absent() keeps no label,
// carries both as static labels the chart sets. The test logs an entry
// loudly, and fails once one is fixed, so that the list only shrinks.
var knownUnscoped = map[string]string{}
