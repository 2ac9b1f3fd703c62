package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// cmdProbe is `faxgate probe [--timeout D] URL`: one GET, exit 0 on a 2xx
// answer and 1 otherwise, with one line on stderr either way. The Helm
// chart's `helm test` runs it in the gateway's own image (which has no shell
// and no wget) against /readyz on the admin port (docs/deployment.md).
func cmdProbe(ctx context.Context, args []string, e env) int {
	fs := flag.NewFlagSet("faxgate probe", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "faxgate probe: exactly one URL is required (faxgate probe [--timeout 5s] URL)")
		return 1
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(e.stderr, "faxgate probe: %q is not an http or https URL\n", fs.Arg(0))
		return 1
	}
	// What the line names: no credentials, query or fragment, which a URL
	// may carry and a log must not.
	shown := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		fmt.Fprintf(e.stderr, "faxgate probe: GET %s: %v\n", shown, err)
		return 1
	}
	client := &http.Client{
		// A redirect is an answer, not a success: the probe asks one URL.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		// The cause alone: url.Error repeats the URL, credentials masked
		// but query and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(e.stderr, "faxgate probe: GET %s: no answer within %s\n", shown, *timeout)
		} else {
			fmt.Fprintf(e.stderr, "faxgate probe: GET %s: %v\n", shown, err)
		}
		return 1
	}
	defer resp.Body.Close()
	// The start of the body, on the same line: /readyz says why it is not
	// ready ({"ready":false,"reason":...}).
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	body := strings.Join(strings.FieldsFunc(string(b), func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }), " ")
	line := fmt.Sprintf("faxgate probe: GET %s: %s", shown, resp.Status)
	if body != "" {
		line += ": " + body
	}
	fmt.Fprintln(e.stderr, line)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 1
	}
	return 0
}
