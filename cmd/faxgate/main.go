// Command faxgate is the authenticating gateway in front of the Customer API.
// main is wiring only: it parses arguments, loads config, builds the parts
// and returns an exit code.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	sighup := make(chan os.Signal, 1)
	signal.Notify(sighup, syscall.SIGHUP)
	hup := make(chan struct{}, 1)
	go func() {
		for range sighup {
			select {
			case hup <- struct{}{}:
			default: // a reload is already pending
			}
		}
	}()
	code := run(ctx, os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.LookupEnv, hup: hup,
		logFlushEvery: time.Second})
	stop()
	os.Exit(code)
}
