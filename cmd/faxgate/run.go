package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/config"
)

// env is the process environment handed to run, so tests can drive the
// program without touching the real one.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) (string, bool)
	// ready, when set, receives the bound addresses once the gateway serves.
	ready func(proxyAddr, adminAddr string)
	// hup delivers SIGHUP: reload the config file.
	hup <-chan struct{}
	// reloadEvery is how often the config file is checked for changes (default 2s).
	reloadEvery time.Duration
	// clock, when set, replaces the wall clock (tests).
	clock clock.Clock
	// logFlushEvery buffers the non-audit log lines and writes them at
	// most this far apart (main: 1s); 0 writes each line at once (tests
	// that read stderr as they go).
	logFlushEvery time.Duration
}

const usage = `usage:
  faxgate serve --config FILE   run the gateway until SIGINT/SIGTERM
  faxgate check --config FILE   validate FILE and the files and variables it names;
                                exit 0 valid, 1 invalid
  faxgate demo [--listen ADDR] [--admin-listen ADDR]
                                gateway + embedded upstream simulator, with curl examples
  faxgate probe [--timeout 5s] URL
                                GET URL: exit 0 on 2xx, 1 otherwise, one line on stderr
                                (the Helm chart's helm test, in the gateway's own image)
  faxgate version               version, commit, Go version
`

func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return 1
	}
	switch args[0] {
	case "serve":
		return cmdServe(ctx, args[1:], e)
	case "check":
		return cmdCheck(args[1:], e)
	case "demo":
		return cmdDemo(ctx, args[1:], e)
	case "probe":
		return cmdProbe(ctx, args[1:], e)
	case "version", "--version", "-version":
		fmt.Fprintf(e.stdout, "faxgate %s (commit %s, %s)\n", version, commit, runtime.Version())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(e.stdout, usage)
		return 0
	default:
		fmt.Fprintf(e.stderr, "faxgate: unknown command %q\n%s", args[0], usage)
		return 1
	}
}

func configFlag(name string, args []string, e env) (string, bool) {
	fs := flag.NewFlagSet("faxgate "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	path := fs.String("config", "", "configuration file (YAML)")
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "faxgate %s: --config FILE is required\n", name)
		return "", false
	}
	return *path, true
}

func cmdCheck(args []string, e env) int {
	path, ok := configFlag("check", args, e)
	if !ok {
		return 1
	}
	// The same load as serve's, files and environment included, so that
	// check refuses every file serve would refuse to start with; a shadow
	// candidate is checked as the live file is.
	cfg, err := config.LoadAndCheck(path, e.getenv)
	var cand *config.Config
	if err == nil {
		cand, err = config.LoadCandidate(cfg, path, e.getenv, true)
	}
	var ps config.Problems
	switch {
	case errors.As(err, &ps):
		for _, p := range ps {
			fmt.Fprintln(e.stdout, p.String())
		}
		return 1
	case err != nil:
		fmt.Fprintf(e.stdout, "%v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "%s: ok\n", path)
	if cand != nil {
		differs := "the same rules as the live file"
		if d := config.CandidateDiffers(cand, cfg); len(d) > 0 {
			differs = "differs from the live file in " + strings.Join(d, ", ")
		}
		fmt.Fprintf(e.stdout, "%s: ok, shadow candidate: %s\n", cfg.Shadow.ConfigFile, differs)
	}
	return 0
}

func cmdServe(ctx context.Context, args []string, e env) int {
	path, ok := configFlag("serve", args, e)
	if !ok {
		return 1
	}
	cfg, err := config.LoadAndCheck(path, e.getenv)
	if err == nil {
		_, err = config.LoadCandidate(cfg, path, e.getenv, true) // the gateway loads it again; check it here first
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "faxgate: %s\n", oneLine(path, err))
		return 1
	}
	if err := serve(ctx, cfg, path, e); err != nil {
		fmt.Fprintf(e.stderr, "faxgate: %v\n", err)
		return 1
	}
	return 0
}

// oneLine is the one-line reason on stderr with which serve refuses a bad
// config (docs/configuration.md).
func oneLine(path string, err error) string {
	var ps config.Problems
	if errors.As(err, &ps) && len(ps) > 0 {
		more := ""
		if len(ps) > 1 {
			more = fmt.Sprintf(" (and %d more; run faxgate check --config %s)", len(ps)-1, path)
		}
		return "invalid config " + path + ": " + ps[0].String() + more
	}
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
