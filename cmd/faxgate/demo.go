package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/faxgate/faxgate/internal/app/faxsim"
	"github.com/faxgate/faxgate/internal/config"
)

//go:embed demo.yaml
var demoConfig []byte

// cmdDemo runs the gateway in front of an embedded upstream simulator and
// prints curl commands that work when pasted.
func cmdDemo(ctx context.Context, args []string, e env) int {
	fs := flag.NewFlagSet("faxgate demo", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "proxy listen address")
	adminListen := fs.String("admin-listen", "127.0.0.1:9090", "admin listen address")
	withTLS := fs.Bool("tls", false, "serve HTTPS (and HTTP/2) with a throwaway CA, and name caller ops by a client certificate (mTLS)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "faxgate demo: unexpected argument %q\n", fs.Arg(0))
		return 1
	}

	var kb [24]byte
	_, _ = rand.Read(kb[:])
	key := "demo_" + hex.EncodeToString(kb[:])
	// The simulator enforces a vendor limit small enough to meet by hand, so
	// the demo can show a Retry-After hold.
	sim := faxsim.New(faxsim.Options{APIKey: key, EndpointLimit: demoVendorLimit})
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(e.stderr, "faxgate: simulator listener: %v\n", err)
		return 1
	}
	ssrv := &http.Server{Handler: sim, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = ssrv.Serve(sln) }()
	defer ssrv.Close()

	vars := map[string]string{
		"FAXGATE_DEMO_LISTEN":       *listen,
		"FAXGATE_DEMO_ADMIN_LISTEN": *adminListen,
		"FAXGATE_DEMO_UPSTREAM":     "http://" + sln.Addr().String(),
		"FAXGATE_DEMO_API_KEY":      key,
	}
	getenv := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	cfg, err := config.Parse(demoConfig, getenv)
	if err != nil {
		fmt.Fprintf(e.stderr, "faxgate: demo config: %s\n", oneLine("demo.yaml", err))
		return 1
	}
	var pki *demoPKI
	if *withTLS {
		dir, err := os.MkdirTemp("", "faxgate-demo-tls-")
		if err != nil {
			fmt.Fprintf(e.stderr, "faxgate: demo --tls: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		if pki, err = newDemoPKI(dir); err != nil {
			fmt.Fprintf(e.stderr, "faxgate: demo --tls: %v\n", err)
			return 1
		}
		t := &cfg.Server.TLS
		t.Mode, t.CertFile, t.KeyFile, t.ClientCAFile, t.ClientAuth = "files", pki.Cert, pki.Key, pki.CA, "optional"
		for i := range cfg.Callers.List {
			if cfg.Callers.List[i].Name == "ops" {
				cfg.Callers.List[i].SpiffeIDs = append(cfg.Callers.List[i].SpiffeIDs, demoOpsSPIFFE)
			}
		}
		if p := config.Validate(cfg); len(p) > 0 {
			fmt.Fprintf(e.stderr, "faxgate: demo --tls config: %v\n", p)
			return 1
		}
	}
	de := e
	de.getenv = getenv
	de.ready = func(proxyAddr, adminAddr string) {
		printDemo(e, proxyAddr, adminAddr, sln.Addr().String(), pki)
		if e.ready != nil {
			e.ready(proxyAddr, adminAddr)
		}
	}
	if err := serve(ctx, cfg, "", de); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(e.stderr, "faxgate: %v\n", err)
		return 1
	}
	return 0
}

// demoVendorLimit is the simulator's per-endpoint limit in the demo.
var demoVendorLimit = faxsim.Window{Requests: 20, Per: 10 * time.Second}

func printDemo(e env, proxyAddr, adminAddr, simAddr string, pki *demoPKI) {
	p, a, curl := "http://"+proxyAddr, "http://"+adminAddr, "curl -s"
	if pki != nil {
		p, curl = "https://"+proxyAddr, "curl -s --cacert '"+pki.CA+"'"
	}
	fmt.Fprintf(e.stdout, `faxgate demo: gateway %s, admin %s, upstream simulator http://%s
No credentials anywhere: the gateway holds the simulator's API key and injects the token.
Paste any of these into another terminal (Ctrl-C here stops the demo):

# List contacts. You are caller "demo", identified by your loopback source address.
%s -X POST %s/v1/contacts/list -H 'Content-Type: application/json' -d '{}'

# Create a contact.
%s -X POST %s/v1/contacts/create -H 'Content-Type: application/json' -d '{"type":"individual","is_organization":false,"first_name":"Ada","last_name":"Lovelace","email":"ada@example.com","fax_number":"+15551234567","dob":"1815-12-10","gender":"female"}'

# Deleting a number is denied by default: 403 with error "forbidden".
%s -i -X POST %s/v1/numbers/delete -H 'Content-Type: application/json' -d '{"number_id":"num_1001","order_id":"ord_5001"}'

# Caller "ops" (named by X-Faxgate-Caller from a trusted proxy) is granted numbers.delete,
# and must echo the number_id in X-Faxgate-Confirm.
%s -X POST %s/v1/numbers/delete -H 'X-Faxgate-Caller: ops' -H 'X-Faxgate-Confirm: num_1001' -H 'Content-Type: application/json' -d '{"number_id":"num_1001","order_id":"ord_5001"}'
`, p, a, simAddr, curl, p, curl, p, curl, p, curl, p)
	if pki != nil {
		fmt.Fprintf(e.stdout, `
# Caller "ops" again, now by its client certificate (mTLS: URI SAN %s), no header.
%s --cert '%s' --key '%s' -X POST %s/v1/numbers/delete -H 'X-Faxgate-Confirm: num_1002' -H 'Content-Type: application/json' -d '{"number_id":"num_1002","order_id":"ord_5002"}'
`, demoOpsSPIFFE, curl, pki.ClientCert, pki.ClientKey, p)
	}
	fmt.Fprintf(e.stdout, `
# A vendor 429, waited out (upstream_budget.retry_throttled, max_wait: 4s). The simulator
# answers the next request with the vendor's 429 and Retry-After: 2; faxgate holds the route,
# waits the 2 s out and sends the request again: 200 about 2 s later, where the caller would
# have got the 429 (its access line says attempts 2 and wait_ms).
curl -s -X POST http://%s/_sim/fail -H 'Content-Type: application/json' -d '{"count":1,"status":429,"retry_after":2}'
%s -w '\n%%{http_code} after %%{time_total}s\n' -X POST %s/v1/contacts/list -H 'Content-Type: application/json' -d '{}'
`, simAddr, curl, p)
	fmt.Fprintf(e.stdout, `
# The simulator enforces a vendor limit of %d requests per %s per endpoint. In this loop the
# 21st request gets the vendor's 429, relayed as is; from then on faxgate holds the route and
# answers 429 upstream_throttled itself, without calling the vendor, until Retry-After passes.
for i in $(seq 22); do %s -o /dev/null -w '%%{http_code} ' %s/v1/esign_templates; done; echo
%s -i %s/v1/esign_templates
# The hold, and the upstream_budget windows per caller.
curl -s %s/budget

# Readiness and metrics.
curl -s %s/readyz
curl -s %s/metrics | grep '^faxgate_'
`, demoVendorLimit.Requests, demoVendorLimit.Per, curl, p, curl, p, a, a, a)
}
