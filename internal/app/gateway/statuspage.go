package gateway

import (
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/faxgate/faxgate/policy/limit"
	"github.com/faxgate/faxgate/tokencache"
)

// The status page (docs/status-page.md) is one self-contained HTML page:
// styles and its one script inline, nothing from another host, so that it
// works through kubectl port-forward from a laptop with no internet. The
// server renders it whole (readable without the script); the script then
// fetches status.json every refreshEvery and redraws the same layout from
// its "page" member, which is built here once, for both: one layout, two
// renderers of a few lines each.

//go:embed statuspage.html
var statusHTML string

// refreshEvery is how often the page's script fetches status.json.
const refreshEvery = 2 * time.Second

// page is the status laid out as the page shows it: the problems, then
// sections of plain tables of text.
type page struct {
	Generated string    `json:"generated"`
	Problems  []string  `json:"problems"`
	Sections  []section `json:"sections"`
}

type section struct {
	ID     string  `json:"id"`
	Title  string  `json:"title"`
	Note   string  `json:"note,omitempty"`
	Tables []table `json:"tables"`
}

type table struct {
	Caption string   `json:"caption,omitempty"`
	Head    []string `json:"head,omitempty"`
	Rows    [][]cell `json:"rows"`
	// Empty is shown instead of a table without rows.
	Empty string `json:"empty,omitempty"`
}

// cell is one table cell: its text, and "bad" (red) or "warn" in Class.
type cell struct {
	Text  string `json:"t"`
	Class string `json:"c,omitempty"`
}

func text(s string) cell                 { return cell{Text: s} }
func marked(s, class string) cell        { return cell{Text: s, Class: class} }
func kv(k string, v cell) []cell         { return []cell{{Text: k}, v} }
func ifBad(bad bool) string              { return pick(bad, "bad", "") }
func list(s []string) string             { return strings.Join(s, ", ") }
func orDash(s string) string             { return pick(s == "", "-", s) }
func humanSeconds(s int64) string        { return humanDuration(time.Duration(s) * time.Second) }
func count[T ~int | ~uint64](n T) string { return strconv.FormatUint(uint64(n), 10) }

// pick is a if cond holds, else b.
func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

// humanDuration is d in whole seconds, as 45s, 3m05s or 2h07m.
func humanDuration(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s >= 3600:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	case s >= 60:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%ds", max(s, 0))
}

// when is t as UTC with how long ago (or ahead) of now it is.
func when(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	rel := humanDuration(d) + " ago"
	if d < 0 {
		rel = "in " + humanDuration(-d)
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC") + " (" + rel + ")"
}

func whenPtr(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return when(*t, now)
}

// layout builds the page of st.
func layout(st *Status) *page {
	now := st.Now
	p := &page{Generated: now.Format("2006-01-02 15:04:05 UTC"), Problems: st.Problems}

	ready := marked("ready", "")
	if !st.Ready {
		ready = marked("not ready: "+st.ReadyReason, "bad")
	}
	p.Sections = append(p.Sections, section{ID: "gateway", Title: "Gateway", Tables: []table{{Rows: [][]cell{
		kv("Version", text(st.Version+" (revision "+pick(st.Revision == "", "unknown", st.Revision)+")")),
		kv("Uptime", text(humanSeconds(st.UptimeSeconds)+", since "+st.Started.Format("2006-01-02 15:04:05 UTC"))),
		kv("Readiness", ready),
	}}}})

	t := st.Token
	left := "-"
	if t.ExpiresAt != nil {
		left = humanSeconds(t.SecondsLeft) + " (expires " + t.ExpiresAt.Format("2006-01-02 15:04:05 UTC") + ")"
	}
	renewal := whenPtr(t.LastRenewal, now)
	if t.LastResult != "" {
		renewal += ", " + t.LastResult
	}
	p.Sections = append(p.Sections, section{ID: "token", Title: "Upstream token", Tables: []table{{Rows: [][]cell{
		kv("State", marked(t.State, ifBad(!t.Valid || t.State == tokencache.StateFailing))),
		kv("Time left", text(left)),
		kv("Last renewal", marked(renewal, ifBad(t.LastResult != "" && t.LastResult != "ok"))),
		kv("Source", text(orDash(t.Source))),
		kv("Store", text(t.Store)),
	}}}})

	id := st.Identity
	callers := table{Head: []string{"Caller", "Identified by", "Allowed routes", "Rate limit",
		"Requests (5 min)", "Denials (5 min)", "Limited now", "Waiting"}, Empty: "No callers configured."}
	for _, cs := range st.Callers {
		var by []string
		for _, g := range []struct {
			k string
			v []string
		}{{"CIDRs", cs.CIDRs}, {"SPIFFE IDs", cs.SpiffeIDs}, {"header values", cs.HeaderValues}} {
			if len(g.v) > 0 {
				by = append(by, g.k+": "+list(g.v))
			}
		}
		allowed, rl := "none", "-"
		if len(cs.Allow) > 0 {
			allowed = list(cs.Allow) + " (" + strconv.Itoa(len(cs.Routes)) + " routes: " + list(cs.Routes) + ")"
		}
		if cs.Name == "unidentified" {
			by, allowed = []string{"no caller matched"}, "none (callers.unidentified: "+id.Unidentified+")"
		} else {
			rl = strconv.FormatFloat(cs.RateLimit.RPS, 'f', -1, 64) + "/s, burst " + strconv.Itoa(cs.RateLimit.Burst)
			if cs.RateLimitDefault {
				rl += " (default)"
			}
		}
		limited := marked("no", "")
		if cs.LimitedNow {
			limited = marked("yes", "warn")
		} else if cs.LastLimited != nil {
			limited = text("no (last " + when(*cs.LastLimited, now) + ")")
		}
		callers.Rows = append(callers.Rows, []cell{text(cs.Name), text(orDash(strings.Join(by, "; "))), text(allowed), text(rl),
			text(count(cs.Requests5m)), marked(count(cs.Denials5m), pick(cs.Denials5m > 0, "warn", "")),
			limited, text(count(cs.Waiting))})
	}
	note := "Identity header " + orDash(id.Header) + ", believed from trusted proxies " + orDash(list(id.TrustedProxies)) +
		"; callers.unidentified: " + id.Unidentified + ". Requests are every answer, denials the gateway's own refusals."
	p.Sections = append(p.Sections, section{ID: "callers", Title: "Callers", Note: note, Tables: []table{callers}})

	sens := table{Head: []string{"Route", "Confirm", "Granted to"}, Empty: "No sensitive routes."}
	for _, s := range st.SensitiveRoutes {
		sens.Rows = append(sens.Rows, []cell{text(s.Route), text(pick(s.Confirm, "yes", "no")),
			text(orDash(list(s.Granted)))})
	}
	p.Sections = append(p.Sections, section{ID: "sensitive", Title: "Sensitive routes", Tables: []table{sens}})

	b := st.Budget
	holds := table{Caption: "Holds after an upstream 429", Head: []string{"Route", "Time left"}, Empty: "No route is held."}
	for _, h := range b.Holds {
		holds.Rows = append(holds.Rows, []cell{marked(h.Route, "bad"), marked(humanSeconds(h.SecondsLeft), "bad")})
	}
	windows := table{Caption: "Windows per caller", Head: []string{"Limit", "Window", "Caller", "Used", "Reserved", "Remaining"},
		Empty: "No upstream_budget limits, or no requests in their windows."}
	for _, l := range b.Limits {
		for _, w := range l.Windows {
			win := "tenant"
			if w.Route != "" {
				win = "route " + w.Route
			}
			win += fmt.Sprintf(": %d of %d used per %s", w.Used, l.Effective, l.Per)
			for _, name := range sortedKeys(w.Callers) {
				cw := w.Callers[name]
				windows.Rows = append(windows.Rows, []cell{text(l.Name), text(win), text(name), text(count(cw.Used)),
					text(count(cw.Reserved)), marked(count(cw.Remaining), ifBad(cw.Remaining == 0))})
			}
		}
	}
	waiting := "Requests waiting: " + count(b.Waiting)
	if b.MaxWaitSeconds == 0 {
		waiting += " (upstream_budget.max_wait is 0s: refused at once)"
	} else {
		waiting += fmt.Sprintf(" (for at most %gs)", b.MaxWaitSeconds)
	}
	p.Sections = append(p.Sections, section{ID: "budget", Title: "Upstream budget",
		Note: "Backend " + b.Backend + ". " + waiting + ".", Tables: []table{holds, windows}})

	cf := st.Config
	result := marked(orDash(cf.LastResult), ifBad(cf.LastResult == "error"))
	if cf.LastResult == "error" {
		result.Text = "error: the running configuration stays in force\n" + strings.Join(cf.Problems, "\n")
	}
	restart := marked("no", "")
	if cf.RestartRequired {
		restart = marked("yes: "+list(cf.RestartSettings), "bad")
	}
	p.Sections = append(p.Sections, section{ID: "config", Title: "Configuration", Tables: []table{{Rows: [][]cell{
		kv("File", text(orDash(cf.File))),
		kv("Last load", text(when(cf.LastReload, now)+", on "+cf.Trigger)),
		kv("Result", result),
		kv("Restart required", restart),
	}}}})

	r := st.Redis
	redis := table{Rows: [][]cell{kv("Configured", text(pick(r.Configured, "yes: "+list(r.Addrs), "no")))}}
	if r.Configured {
		redis.Rows = append(redis.Rows, redisTopology(r, now)...)
	}
	for _, u := range []struct{ k, v string }{{"Rate limits", r.RateLimit}, {"Upstream budget", r.Budget}, {"Token store", r.TokenStore}} {
		if u.v != "" {
			redis.Rows = append(redis.Rows, kv(u.k, marked(u.v, ifBad(u.v == limit.SharedFallback))))
		}
	}
	p.Sections = append(p.Sections, section{ID: "redis", Title: "Redis", Tables: []table{redis}})

	certs := table{Head: []string{"Domain", "Expires", "Time left"}, Empty: "No certificates: server.tls.mode is " + st.TLS.Mode + "."}
	for _, ct := range st.TLS.Certificates {
		if ct.NotAfter == nil {
			certs.Rows = append(certs.Rows, []cell{text(ct.Domain), marked("none yet", "bad"), text("-")})
			continue
		}
		soon := time.Duration(ct.SecondsLeft)*time.Second < certWarnBefore
		certs.Rows = append(certs.Rows, []cell{text(ct.Domain), text(ct.NotAfter.Format("2006-01-02 15:04:05 UTC")),
			marked(humanSeconds(ct.SecondsLeft), ifBad(soon))})
	}
	p.Sections = append(p.Sections, section{ID: "tls", Title: "TLS (mode " + st.TLS.Mode + ")", Tables: []table{certs}})

	e := st.Egress
	way := table{Rows: [][]cell{kv("Egress proxy", text(pick(e.Proxy == "", "none (direct)", e.Proxy)))}}
	if e.Proxy != "" {
		way.Rows = append(way.Rows, kv("Proxy credentials", text(pick(e.Credentials, "from upstream.proxy_auth_file", "none"))))
		for _, r := range []string{"unreachable", "auth", "refused"} {
			way.Rows = append(way.Rows, kv("Proxy failures: "+r, marked(strconv.FormatUint(e.ProxyErrors[r], 10), pick(e.ProxyErrors[r] > 0, "warn", ""))))
		}
	}
	for _, r := range []string{"unsent", "reset", "throttled"} {
		way.Rows = append(way.Rows, kv("Sent again: "+r, text(strconv.FormatUint(e.Retries[r], 10))))
	}
	p.Sections = append(p.Sections, section{ID: "egress", Title: "The way to the vendor", Tables: []table{way}})

	if sh := st.Shadow; sh != nil {
		diffs := table{Caption: "Requests the candidate decides otherwise, last 5 minutes",
			Head: []string{"Caller", "Live", "Candidate", "Requests"}, Empty: "None: the candidate agrees with every decision."}
		callers := make([]string, 0, len(sh.Differences))
		for c := range sh.Differences {
			callers = append(callers, c)
		}
		sort.Strings(callers)
		for _, c := range callers {
			for _, d := range sh.Differences[c] {
				diffs.Rows = append(diffs.Rows, []cell{text(c), text(d.Live), marked(d.Candidate, "warn"), text(strconv.FormatUint(d.Count, 10))})
			}
		}
		p.Sections = append(p.Sections, section{ID: "shadow", Title: "Shadow candidate",
			Note: "Decided beside the live configuration and never enforced: " + sh.ConfigFile, Tables: []table{diffs}})
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// statusPage is GET / and GET /status: the HTML page, or with Accept:
// application/json (on /status) the JSON of /status.json.
func (g *Gateway) statusPage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/status" && wantsJSON(r) {
		g.statusJSON(w, r)
		return
	}
	st := g.status(r.Context())
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	n := base64.RawStdEncoding.EncodeToString(nonce[:])
	body := renderPage(layout(st), n, refreshEvery.Milliseconds())
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Nothing but this page's own inline style and script, and fetches of
	// its own origin: the browser itself refuses anything from elsewhere.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'nonce-"+n+"'; script-src 'nonce-"+n+
		"'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	_, _ = io.WriteString(w, body)
}

// statusJSON is GET /status.json: the same data as the page.
func (g *Gateway) statusJSON(w http.ResponseWriter, r *http.Request) {
	st := g.status(r.Context())
	st.Page = layout(st)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	writeJSON(w, http.StatusOK, st)
}

// wantsJSON: the Accept header prefers application/json to text/html.
func wantsJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "application/json":
			return true
		case "text/html":
			return false
		}
	}
	return false
}

// redisTopology is the rows that say which topology is in use and which
// node is primary.
func redisTopology(r RedisStatus, now time.Time) [][]cell {
	mode := r.Mode
	if r.MasterName != "" {
		mode += " (master " + r.MasterName + ")"
	}
	rows := [][]cell{kv("Topology", text(mode))}
	switch {
	case r.Mode == "sentinel":
		rows = append(rows, kv("Primary", marked(orDash(r.Primary), ifBad(r.Primary == ""))))
	case r.Mode == "cluster":
		rows = append(rows, kv("Primaries", marked(pick(len(r.Primaries) == 0, "-", list(r.Primaries)), ifBad(len(r.Primaries) == 0))))
	default:
		return rows
	}
	changes := count(uint64(r.PrimaryChanges)) + ", primary since " + whenPtr(r.PrimarySince, now)
	rows = append(rows, kv("Primary changes", marked(changes, pick(r.PrimaryChanges > 0, "warn", ""))))
	checked := whenPtr(r.TopologyChecked, now)
	if r.TopologyError != "" {
		checked += "; last look failed: " + r.TopologyError
	}
	return append(rows, kv("Last look", marked(checked, ifBad(r.TopologyError != ""))))
}
