//go:build alerting

package alerting

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// startPrometheus runs Prometheus with the rules files, scraping every
// replica of every release each second and sending alerts to amAddr.
func startPrometheus(t *testing.T, bin, dir string, releases []*release, ruleFiles []string, amAddr string) *promAPI {
	t.Helper()
	port := freePort(t)
	var rules strings.Builder
	for _, f := range ruleFiles {
		fmt.Fprintf(&rules, "  - %q\n", f)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
  external_labels:
    cluster: %q
rule_files:
%s
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%q]
%s`, cluster, rules.String(), amAddr, scrapeConfig(releases))
	path := filepath.Join(dir, "prometheus.yml")
	writeFile(t, path, cfg)
	p := startProc(t, "prometheus", bin,
		"--config.file="+path,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		// Alerts go to Alertmanager at once and then every second, not
		// every minute.
		"--rules.alert.resend-delay=1s",
		"--log.level=warn")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitHTTP(t, p, base+"/-/ready", 30*time.Second)
	return &promAPI{base: base, client: &http.Client{Timeout: 30 * time.Second}}
}

// webhook is an Alertmanager webhook receiver of the test: it keeps every
// alert it is sent.
type webhook struct {
	name string
	url  string

	mu     sync.Mutex
	alerts []amAlert
}

// amAlert is an alert as Alertmanager's webhook sends it.
type amAlert struct {
	Status string            `json:"status"`
	Labels map[string]string `json:"labels"`
}

func newWebhook(t *testing.T, name string) *webhook {
	t.Helper()
	h := &webhook{name: name}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			Alerts []amAlert `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.alerts = append(h.alerts, msg.Alerts...)
		h.mu.Unlock()
	}))
	h.url = srv.URL
	return h
}

// received returns a copy of every alert delivered so far.
func (h *webhook) received() []amAlert {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]amAlert(nil), h.alerts...)
}

// has reports whether an alert named name with the labels want has been
// delivered.
func (h *webhook) has(name string, want map[string]string) bool {
	for _, a := range h.received() {
		if a.Labels["alertname"] == name && matches(a.Labels, want) {
			return true
		}
	}
	return false
}

// Alertmanager receivers: one per namespace, and the default for alerts
// that carry none.
const (
	receiverA       = "team-a"
	receiverB       = "team-b"
	receiverDefault = "unrouted"
)

// startAlertmanager runs Alertmanager routing by namespace to the test's
// webhooks, without clustering, and returns its address.
func (s *stack) startAlertmanager(t *testing.T, bin string) string {
	t.Helper()
	for _, name := range []string{receiverA, receiverB, receiverDefault} {
		s.hooks[name] = newWebhook(t, name)
	}
	cfg := fmt.Sprintf(`route:
  receiver: %[1]s
  group_by: [alertname, namespace, job]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['namespace="%[4]s"']
      receiver: %[2]s
    - matchers: ['namespace="%[5]s"']
      receiver: %[3]s
receivers:
  - name: %[1]s
    webhook_configs: [{url: %[6]q}]
  - name: %[2]s
    webhook_configs: [{url: %[7]q}]
  - name: %[3]s
    webhook_configs: [{url: %[8]q}]
`, receiverDefault, receiverA, receiverB, releaseSpecs[0].namespace, releaseSpecs[1].namespace,
		s.hooks[receiverDefault].url, s.hooks[receiverA].url, s.hooks[receiverB].url)
	path := filepath.Join(s.dir, "alertmanager.yml")
	writeFile(t, path, cfg)
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.am = startProc(t, "alertmanager", bin,
		"--config.file="+path,
		"--storage.path="+filepath.Join(s.dir, "alertmanager"),
		"--web.listen-address="+addr,
		"--cluster.listen-address=",
		"--log.level=warn")
	waitHTTP(t, s.am, "http://"+addr+"/-/ready", 30*time.Second)
	return addr
}

// promAPI speaks Prometheus's HTTP API (/api/v1) with plain net/http.
type promAPI struct {
	base   string
	client *http.Client
}

// promAlert is an entry of /api/v1/alerts.
type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"` // pending | firing
	ActiveAt time.Time         `json:"activeAt"`
	Value    string            `json:"value"`
}

func (a promAlert) String() string {
	keys := make([]string, 0, len(a.Labels))
	for k := range a.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		if b.Len() > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%q", k, a.Labels[k])
	}
	return fmt.Sprintf("%s{%s} %s since %s", a.Labels["alertname"], b.String(), a.State, a.ActiveAt.Format(time.TimeOnly))
}

// get calls path with query and decodes data of the success envelope into v.
func (p *promAPI) get(path string, query url.Values, v any) error {
	resp, err := p.client.Get(p.base + path + "?" + query.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d, not JSON: %.200s", path, resp.StatusCode, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, v)
}

// alerts returns the active (pending and firing) alerts.
func (p *promAPI) alerts() ([]promAlert, error) {
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

// sample is one series of a query result: its labels and, for an instant
// query, its value (for a range query, how many points it has).
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

// query runs an instant query.
func (p *promAPI) query(expr string, at time.Time) ([]sample, error) {
	q := url.Values{"query": {expr}}
	if !at.IsZero() {
		q.Set("time", fmt.Sprint(at.Unix()))
	}
	return p.result("/api/v1/query", q)
}

// queryRange runs a range query.
func (p *promAPI) queryRange(expr string, start, end time.Time, step time.Duration) ([]sample, error) {
	q := url.Values{
		"query": {expr},
		"start": {fmt.Sprint(start.Unix())},
		"end":   {fmt.Sprint(end.Unix())},
		"step":  {fmt.Sprint(int(step.Seconds()))},
	}
	return p.result("/api/v1/query_range", q)
}

func (p *promAPI) result(path string, q url.Values) ([]sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get(path, q, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector", "matrix":
		var out []sample
		err := json.Unmarshal(data.Result, &out)
		return out, err
	case "scalar", "string":
		var v []any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		return []sample{{Value: v}}, nil
	}
	return nil, fmt.Errorf("%s: result type %q", path, data.ResultType)
}

// matches reports whether labels holds every pair of want.
func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// find returns the alerts named name whose labels hold want.
func find(alerts []promAlert, name string, want map[string]string) []promAlert {
	var out []promAlert
	for _, a := range alerts {
		if a.Labels["alertname"] == name && matches(a.Labels, want) {
			out = append(out, a)
		}
	}
	return out
}

// ruleAlert is an active alert with the rules file of the rule that made it,
// which tells two releases' alerts apart even when the alert's labels do not.
type ruleAlert struct {
	promAlert
	File string
}

// ruleAlerts returns every active alert of every alerting rule, from
// /api/v1/rules.
func (p *promAPI) ruleAlerts() ([]ruleAlert, error) {
	var data struct {
		Groups []struct {
			File  string `json:"file"`
			Rules []struct {
				Name   string      `json:"name"`
				Alerts []promAlert `json:"alerts"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("/api/v1/rules", url.Values{"type": {"alert"}}, &data); err != nil {
		return nil, err
	}
	var out []ruleAlert
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			for _, a := range r.Alerts {
				out = append(out, ruleAlert{promAlert: a, File: g.File})
			}
		}
	}
	return out, nil
}
