package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// curlCmd is one `curl ...` line of the demo, as a shell would split it.
type curlCmd struct {
	line    string
	method  string
	url     string
	headers [][2]string
	body    *string
	grep    string // the pattern of a trailing `| grep PATTERN`, if any
	// cacert, cert and key are the files of --cacert, --cert and --key.
	cacert, cert, key string
}

// shellWords splits a line the way sh does for what the demo prints: words
// separated by blanks, '...' quoting (no escapes inside), and a bare | as a
// word of its own.
func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, inWord = true, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '"' || c == '\\' || c == '$' || c == '`' || c == ';' || c == '&':
			return nil, fmt.Errorf("unexpected %q at %d: the parser only knows single quotes", c, i)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unclosed quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// parseCurl understands the curl flags the demo uses: -s, -i, -X METHOD,
// -H 'K: V', -d 'BODY', -w 'FORMAT' (only printed), --cacert/--cert/--key
// FILE, one URL, and an optional `| grep 'PATTERN'`.
func parseCurl(line string) (curlCmd, error) {
	c := curlCmd{line: line}
	words, err := shellWords(line)
	if err != nil {
		return c, err
	}
	if len(words) == 0 || words[0] != "curl" {
		return c, fmt.Errorf("not a curl command")
	}
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("%s without its argument", w)
			}
			i++
			return words[i], nil
		}
		switch {
		case w == "-s" || w == "-i":
		case w == "-w":
			if _, err := arg(); err != nil {
				return c, err
			}
		case w == "-X":
			if c.method, err = arg(); err != nil {
				return c, err
			}
		case w == "-H":
			h, err := arg()
			if err != nil {
				return c, err
			}
			k, v, ok := strings.Cut(h, ":")
			if !ok {
				return c, fmt.Errorf("header %q has no colon", h)
			}
			c.headers = append(c.headers, [2]string{k, strings.TrimSpace(v)})
		case w == "--cacert" || w == "--cert" || w == "--key":
			f, err := arg()
			if err != nil {
				return c, err
			}
			*map[string]*string{"--cacert": &c.cacert, "--cert": &c.cert, "--key": &c.key}[w] = f
		case w == "-d":
			d, err := arg()
			if err != nil {
				return c, err
			}
			c.body = &d
		case w == "|":
			if len(words) != i+3 || words[i+1] != "grep" {
				return c, fmt.Errorf("only `| grep PATTERN` may follow curl")
			}
			c.grep = words[i+2]
			i = len(words)
		case strings.HasPrefix(w, "-"):
			return c, fmt.Errorf("unknown curl flag %s", w)
		case c.url != "":
			return c, fmt.Errorf("second URL %s", w)
		default:
			c.url = w
		}
	}
	if c.url == "" {
		return c, fmt.Errorf("no URL")
	}
	if c.method == "" {
		c.method = http.MethodGet
		if c.body != nil {
			c.method = http.MethodPost // what -d does
		}
	}
	return c, nil
}

// do runs the command as curl would, returning status and output (after grep).
func (c curlCmd) do(client *http.Client) (int, string, error) {
	var body io.Reader
	if c.body != nil {
		body = strings.NewReader(*c.body)
	}
	req, err := http.NewRequest(c.method, c.url, body)
	if err != nil {
		return 0, "", err
	}
	if c.body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // curl's -d default
	}
	for _, h := range c.headers {
		req.Header.Set(h[0], h[1])
	}
	if c.cacert != "" {
		// As curl does: trust only the named CA, present the named pair.
		pem, err := os.ReadFile(c.cacert)
		if err != nil {
			return 0, "", err
		}
		cfg := &tls.Config{RootCAs: x509.NewCertPool()}
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return 0, "", fmt.Errorf("%s holds no certificate", c.cacert)
		}
		if c.cert != "" {
			pair, err := tls.LoadX509KeyPair(c.cert, c.key)
			if err != nil {
				return 0, "", err
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr, Timeout: client.Timeout}
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	out := string(b)
	if c.grep != "" {
		re, err := regexp.Compile(c.grep)
		if err != nil {
			return 0, "", err
		}
		var kept []string
		for _, l := range strings.Split(out, "\n") {
			if re.MatchString(l) {
				kept = append(kept, l)
			}
		}
		out = strings.Join(kept, "\n")
	}
	return resp.StatusCode, out, err
}

func TestParseCurl(t *testing.T) {
	c, err := parseCurl(`curl -s -i -X POST http://h/v1/x -H 'A: b c' -H 'X-Y:z' -d '{"k":"v w"}'`)
	if err != nil {
		t.Fatal(err)
	}
	if c.method != "POST" || c.url != "http://h/v1/x" || *c.body != `{"k":"v w"}` ||
		fmt.Sprint(c.headers) != "[[A b c] [X-Y z]]" {
		t.Errorf("parsed %+v", c)
	}
	c, err = parseCurl(`curl -s http://h/metrics | grep '^faxgate_'`)
	if err != nil || c.method != "GET" || c.grep != "^faxgate_" {
		t.Errorf("parsed %+v, %v", c, err)
	}
	for _, bad := range []string{`curl -s`, `curl -X`, `curl -d 'x`, `curl -v http://h`, `curl "http://h"`, `curl http://h | sort`} {
		if _, err := parseCurl(bad); err == nil {
			t.Errorf("parseCurl(%q) accepted it", bad)
		}
	}
}

// TestDemo runs `faxgate demo` and executes every curl line it prints, as a
// person pasting them would: they must all work.
func TestDemo(t *testing.T) {
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan int, 1)
	e := env{stdout: &stdout, stderr: &stderr, getenv: mapEnv(nil),
		ready: func(p, a string) { addrs <- [2]string{p, a} }}
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, e)
	}()
	var adminURL string
	select {
	case a := <-addrs:
		adminURL = "http://" + a[1]
	case code := <-done:
		t.Fatalf("demo exited %d before it was ready\nstderr:\n%s", code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("demo not ready after 10s\nstderr:\n%s", stderr.String())
	}
	g := &gateway{adminURL: adminURL, stderr: &stderr}
	g.waitReady(t)

	var cmds []curlCmd
	for _, l := range lines(stdout.String()) {
		if !strings.HasPrefix(l, "curl ") {
			continue
		}
		c, err := parseCurl(l)
		if err != nil {
			t.Fatalf("demo prints a curl line that does not parse: %v\n%s", err, l)
		}
		cmds = append(cmds, c)
	}

	type want struct {
		path   string
		code   int
		status int    // of the envelope; -1 for no envelope
		errc   string // "error" of the envelope
		has    string // substring of the output
		took   time.Duration
	}
	wants := []want{
		{"/v1/contacts/list", 200, 1, "", "", 0},
		{"/v1/contacts/create", 200, 1, "", "", 0},
		{"/v1/numbers/delete", 403, 0, "forbidden", "", 0},
		{"/v1/numbers/delete", 200, 1, "", "", 0},
		// The vendor's 429 waited out: its Retry-After: 2, then the
		// request sent again.
		{"/_sim/fail", 200, 1, "", "", 0},
		{"/v1/contacts/list", 200, 1, "", "", 1500 * time.Millisecond},
		// After the printed loop (run below): held.
		{"/v1/esign_templates", 429, 0, "upstream_throttled", "", 0},
		{"/budget", 200, -1, "", `"holds":[{"route":"esign.templates.list","retry_after_seconds":`, 0},
		{"/readyz", 200, -1, "", `"ready":true`, 0},
		{"/metrics", 200, -1, "", "faxgate_requests_total{", 0},
	}
	if len(cmds) != len(wants) {
		t.Fatalf("demo prints %d curl lines, want %d:\n%s", len(cmds), len(wants), stdout.String())
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for i, c := range cmds {
		w := wants[i]
		if !strings.HasSuffix(c.url, w.path) {
			t.Errorf("curl line %d is for %s, want %s", i+1, c.url, w.path)
			continue
		}
		if w.errc == "upstream_throttled" {
			// The demo's loop: the vendor's limit, then its 429.
			for j := range demoVendorLimit.Requests + 1 {
				code, out, _ := c.do(client)
				if want := map[bool]int{true: 429, false: 200}[j == demoVendorLimit.Requests]; code != want {
					t.Fatalf("loop request %d: %d %s, want %d", j+1, code, out, want)
				}
			}
		}
		start := time.Now()
		code, out, err := c.do(client)
		if err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		if took := time.Since(start); took < w.took {
			t.Errorf("%s\n= answered after %v, want it to wait out the hold (%v)", c.line, took, w.took)
		}
		if code != w.code {
			t.Errorf("%s\n= %d %s, want %d", c.line, code, out, w.code)
		}
		if w.status >= 0 {
			var env struct {
				Status int    `json:"status"`
				Error  string `json:"error"`
			}
			if err := json.Unmarshal([]byte(out), &env); err != nil || env.Status != w.status || env.Error != w.errc {
				t.Errorf("%s\n= %s, want status %d error %q", c.line, out, w.status, w.errc)
			}
		}
		if !strings.Contains(out, w.has) {
			t.Errorf("%s\n= %.300s, want it to contain %q", c.line, out, w.has)
		}
		if c.grep != "" && out == "" {
			t.Errorf("%s printed nothing", c.line)
		}
	}

	// The generated key reaches the simulator, and no output.
	simURL := regexp.MustCompile(`upstream simulator (http://\S+)`).FindStringSubmatch(stdout.String())
	if simURL == nil {
		t.Fatalf("demo does not name the simulator:\n%s", stdout.String())
	}
	key := simKey(t, simURL[1])
	if !strings.HasPrefix(key, "demo_") || len(key) < 20 {
		t.Fatalf("key sent to the simulator = %q, want a generated demo_ key", key)
	}
	if strings.Contains(stdout.String(), key) || strings.Contains(stderr.String(), key) {
		t.Errorf("the demo printed its API key")
	}
	if regexp.MustCompile(`demo_[0-9a-f]{16,}`).MatchString(stdout.String() + stderr.String()) {
		t.Errorf("the demo printed something that looks like its API key")
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("demo exited %d after cancel, want 0\nstderr:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("demo still running 10s after cancel")
	}
}

// simKey reads the api_secret_key of the first /v1/auth the simulator saw.
func simKey(t *testing.T, simURL string) string {
	t.Helper()
	code, body := get(t, simURL+"/_sim/requests", nil)
	if code != http.StatusOK {
		t.Fatalf("/_sim/requests = %d", code)
	}
	var recs []struct {
		Path string `json:"path"`
		Body string `json:"body"`
	}
	if err := json.Unmarshal([]byte(body), &recs); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Path != "/v1/auth" {
			continue
		}
		var a struct {
			Key string `json:"api_secret_key"`
		}
		if err := json.Unmarshal([]byte(r.Body), &a); err == nil && a.Key != "" {
			return a.Key
		}
	}
	t.Fatalf("the simulator saw no /v1/auth with a key")
	return ""
}

// TestDemoTLS: faxgate demo --tls serves HTTPS with its throwaway CA, and
// every curl line it prints works as printed, the mTLS one naming caller
// ops by its client certificate alone. The CA's directory goes with the demo.
func TestDemoTLS(t *testing.T) {
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan [2]string, 1)
	done := make(chan int, 1)
	e := env{stdout: &stdout, stderr: &stderr, getenv: mapEnv(nil),
		ready: func(p, a string) { addrs <- [2]string{p, a} }}
	go func() {
		done <- run(ctx, []string{"demo", "--tls", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, e)
	}()
	var adminURL string
	select {
	case a := <-addrs:
		adminURL = "http://" + a[1]
	case code := <-done:
		t.Fatalf("demo exited %d before it was ready\nstderr:\n%s", code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("demo not ready after 10s\nstderr:\n%s", stderr.String())
	}
	(&gateway{adminURL: adminURL, stderr: &stderr}).waitReady(t)

	var cmds []curlCmd
	for _, l := range lines(stdout.String()) {
		if strings.HasPrefix(l, "curl ") {
			c, err := parseCurl(l)
			if err != nil {
				t.Fatalf("demo prints a curl line that does not parse: %v\n%s", err, l)
			}
			cmds = append(cmds, c)
		}
	}
	// The four proxy lines, the mTLS one, the vendor's 429 waited out (the
	// simulator's control, the request that waits), the hold's (200: its
	// loop is not run here), then /budget, /readyz and /metrics on the
	// admin listener.
	wantCodes := []int{200, 200, 403, 200, 200, 200, 200, 200, 200, 200, 200}
	if len(cmds) != len(wantCodes) {
		t.Fatalf("demo prints %d curl lines, want %d:\n%s", len(cmds), len(wantCodes), stdout.String())
	}
	var dir string
	client := &http.Client{Timeout: 10 * time.Second}
	for i, c := range cmds {
		proxy := strings.Contains(c.url, "/v1/")
		if proxy != strings.HasPrefix(c.url, "https://") || proxy != (c.cacert != "") {
			t.Errorf("%s: want https with --cacert on the proxy listener only", c.line)
		}
		if code, out, err := c.do(client); err != nil || code != wantCodes[i] {
			t.Errorf("%s\n= %d %.300s %v, want %d", c.line, code, out, err, wantCodes[i])
		}
		if c.cacert != "" {
			dir = c.cacert[:strings.LastIndex(c.cacert, "/")]
		}
	}
	mtls := cmds[4]
	if mtls.cert == "" || mtls.key == "" || hasHeader(mtls, "X-Faxgate-Caller") {
		t.Errorf("the mTLS line should present a certificate and no identity header: %s", mtls.line)
	}
	// Its 200 already says the certificate named ops ("demo", the loopback
	// caller, may not delete): ops deleted twice, by header and by certificate.
	n := 0
	for _, l := range lines(stderr.String()) {
		if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, `"caller":"ops","route":"numbers.delete"`) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d access lines of ops deleting a number, want 2:\n%s", n, stderr.String())
	}
	if strings.Contains(stdout.String()+stderr.String(), "-----BEGIN") {
		t.Errorf("the demo printed PEM")
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("demo exited %d after cancel, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("demo still running 10s after cancel")
	}
	if _, err := os.Stat(dir); dir == "" || !os.IsNotExist(err) {
		t.Errorf("the demo's CA directory %q is left behind (%v)", dir, err)
	}
}

func hasHeader(c curlCmd, name string) bool {
	for _, h := range c.headers {
		if strings.EqualFold(h[0], name) {
			return true
		}
	}
	return false
}
