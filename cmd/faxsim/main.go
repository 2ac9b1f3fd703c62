// Command faxsim runs the upstream simulator as its own process, for callers'
// local development and for tests that want the upstream in another process:
//
//	faxsim --listen ADDR --api-key-file F [--token-ttl 24h]
//
// It prints "faxsim listening on ADDR" once it accepts connections (the bound
// address, so --listen 127.0.0.1:0 is usable) and stops cleanly on SIGINT or
// SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/faxgate/faxgate/internal/app/faxsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// shutdownTimeout bounds how long in-flight requests may take to finish once
// a stop is asked for.
const shutdownTimeout = 10 * time.Second

// run serves until ctx ends and returns the exit code: 0 on a clean stop, 1
// (with a one-line reason on stderr) when it cannot start.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("faxsim", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line below, not with the usage dump
	listen := fs.String("listen", "", "address to listen on, e.g. 127.0.0.1:8081 (required)")
	keyFile := fs.String("api-key-file", "", "file holding the one valid api_secret_key (required)")
	ttl := fs.Duration("token-ttl", 24*time.Hour, "lifetime of issued access tokens")
	endpointLimit := fs.String("endpoint-limit", "", "enforce the vendor's per-endpoint limit, REQUESTS/DURATION (the vendor's is 2500/5m); empty: report only")
	tenantLimit := fs.String("tenant-limit", "", "enforce the vendor's tenant-wide limit, REQUESTS/DURATION (the vendor's is 100000/24h); empty: none")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "usage: faxsim --listen ADDR --api-key-file F [--token-ttl 24h] [--endpoint-limit 2500/5m] [--tenant-limit 100000/24h]")
			fs.PrintDefaults()
			return 0
		}
		return fail(stderr, err.Error())
	}
	switch {
	case fs.NArg() > 0:
		return fail(stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case *listen == "":
		return fail(stderr, "--listen is required")
	case *keyFile == "":
		return fail(stderr, "--api-key-file is required")
	case *ttl < time.Second:
		// expires_in is whole seconds; a shorter lifetime would read as 0.
		return fail(stderr, fmt.Sprintf("--token-ttl must be at least 1s, got %s", *ttl))
	}
	var opts faxsim.Options
	for _, l := range []struct {
		flag string
		val  string
		out  *faxsim.Window
	}{{"--endpoint-limit", *endpointLimit, &opts.EndpointLimit}, {"--tenant-limit", *tenantLimit, &opts.TenantLimit}} {
		if l.val == "" {
			continue
		}
		w, err := faxsim.ParseWindow(l.val)
		if err != nil {
			return fail(stderr, l.flag+" "+err.Error())
		}
		*l.out = w
	}
	raw, err := os.ReadFile(*keyFile)
	if err != nil {
		return fail(stderr, fmt.Sprintf("reading --api-key-file: %v", err))
	}
	key := strings.TrimSpace(string(raw))
	if key == "" {
		return fail(stderr, fmt.Sprintf("--api-key-file %s is empty", *keyFile))
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail(stderr, err.Error())
	}
	srv := &http.Server{
		Handler:           faxsim.New(faxsim.Options{APIKey: key, TokenTTL: *ttl, EndpointLimit: opts.EndpointLimit, TenantLimit: opts.TenantLimit}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No ReadTimeout: multi-MB fax bodies from slow clients are normal.
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "faxsim listening on %s\n", ln.Addr())

	select {
	case err := <-served:
		return fail(stderr, err.Error())
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fail(stderr, fmt.Sprintf("shutdown: %v", err))
	}
	return 0
}

// fail prints the one-line reason and returns the failure exit code.
func fail(stderr io.Writer, reason string) int {
	fmt.Fprintf(stderr, "faxsim: %s\n", reason)
	return 1
}
