# One Makefile; CI (.ci/run) calls the same targets a person does.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
FUZZTIME ?= 30s
SOAK_DURATION ?= 2m

# Modules of their own: deploy/test holds the tests of deploy/ (they need the
# Kubernetes, Helm and Prometheus libraries, which never reach faxgate's
# go.mod); .ci/tools/promtool pins promtool and prometheus, .ci/tools/jaeger
# pins Jaeger, and .ci/tools/kube-apiserver pins kube-apiserver and etcd, for
# .ci/install-tools.
DEPLOY_TEST := deploy/test
TOOL_MODULES := .ci/tools/promtool .ci/tools/jaeger .ci/tools/kube-apiserver

.PHONY: all build test test-browser test-alerting test-apiserver test-tracing soak vet lint bench pgo fuzz tidy-check check-example clean tools mixin chart-schema

all: test build

## build: static binaries in bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/faxgate ./cmd/faxgate
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/faxsim ./cmd/faxsim

## test: vet, then every test with the race detector, the allocation,
## reload-time and body-memory budgets (the refused uploads', and the waiting
## uploads' in a faxgate process of its own) without it (the detector changes
## both), then the tests of
## deploy/ (helm and promtool from `make tools`; without them those tests skip
## loudly, and fail with CI=true)
test: vet
	$(GO) test -race -count=1 -p 1 ./...
	$(GO) test -count=1 -run '^(TestAllocsPer(|Shadowed|Unsampled)Request|TestScaleConfigCompilesFast|TestStalledRefusedUploadsHoldBoundedMemory)$$' ./proxy/
	$(GO) test -count=1 -run '^(TestHoldAllocatesNothing|TestVerdictsQueueInOrderWithoutAllocating)$$' ./proxy/listener/
	$(GO) test -count=1 -run '^TestGatheredWriteOnTCPArrivesWhole$$' ./internal/base/vecio/
	$(GO) test -count=1 -run '^TestWaitingUploadsHoldBoundedMemory$$' ./cmd/faxgate/
	cd $(DEPLOY_TEST) && $(GO) test -count=1 ./...

## test-browser: the status page in headless Chromium (chromedp; the browser
## build tag): skips loudly without chromium on PATH, fails with CI=true. The
## screenshot goes to $$FAXGATE_TEST_ARTIFACTS (default: the test's temp dir).
test-browser:
	$(GO) vet -tags browser ./internal/testing/statuspage/
	$(GO) test -tags browser -count=1 -v ./internal/testing/statuspage/

## test-alerting: the alerting e2e (deploy/test/alerting, build tag alerting):
## faxgate replicas of two releases, faxsim and Redis, under a real Prometheus
## and Alertmanager (from `make tools`), with the chart's rules; the alerts'
## events, every dashboard query, and a soak of SOAK_DURATION (2m unless set)
test-alerting:
	cd $(DEPLOY_TEST) && FAXGATE_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -tags alerting -count=1 -timeout 15m -v ./alerting/

## test-apiserver: the chart on a real API server (deploy/test/apiserver,
## build tag apiserver): etcd and kube-apiserver on loopback with the
## Prometheus Operator's CRDs (from `make tools`), and helm install, upgrade
## (values, then chart version), rollback and uninstall with the main value
## sets. No nodes: pods never run.
test-apiserver:
	cd $(DEPLOY_TEST) && $(GO) test -tags apiserver -count=1 -timeout 15m -v ./apiserver/

## soak: the alerting e2e's soak alone, for ten minutes
soak: SOAK_DURATION = 10m
soak:
	cd $(DEPLOY_TEST) && FAXGATE_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -tags alerting -count=1 -timeout 25m -v -run '^TestSoak$$' ./alerting/

## test-tracing: the tracing end-to-end test against a real Jaeger v2 with
## memory storage (docs/tracing.md); the jaeger binary comes from `make
## tools` (without it the test skips loudly, and fails with CI=true)
test-tracing:
	$(GO) test -race -count=1 -tags tracing ./internal/testing/tracing/

vet:
	$(GO) vet ./...
	$(GO) vet -tags tracing ./internal/testing/tracing/
	cd $(DEPLOY_TEST) && $(GO) vet -tags alerting ./...
	cd $(DEPLOY_TEST) && $(GO) vet -tags apiserver ./apiserver/

## tools: build the pinned helm, promtool, prometheus, alertmanager, jaeger,
## kube-apiserver and etcd (and fetch the Prometheus Operator's CRDs) into
## ~/.cache/faxgate-tools/bin
tools:
	.ci/install-tools

## mixin: write the alert rules, the dashboard and the README's alert table
## from their Go source, deploy/mixin, into deploy/, the chart (Helm reads
## only files inside it) and README.md, and the chart's schema for config
## from the configuration types; a test fails while any is stale
mixin:
	$(GO) run ./cmd/faxgate-mixin -rules deploy/prometheus/faxgate-rules.yaml -dashboard deploy/grafana/faxgate.json -readme README.md \
	  -chart-rules deploy/helm/faxgate/files/faxgate-rules.yaml -chart-schema deploy/helm/faxgate/values.schema.json
	cp deploy/grafana/faxgate.json deploy/helm/faxgate/files/faxgate.json

## chart-schema: the part of make mixin that regenerates the chart's schema
## for config from faxgate's configuration types (after adding a config key)
chart-schema:
	$(GO) run ./cmd/faxgate-mixin -chart-schema deploy/helm/faxgate/values.schema.json

STATICCHECK_VERSION ?= v0.8.2
GOVULNCHECK_VERSION ?= v1.9.0

## lint: gofmt, staticcheck (pinned; the version the module proxy serves) and
## govulncheck (it needs its vulnerability database: reported, not fatal, when
## that is unreachable, as it is on the CI machine)
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags tracing ./internal/testing/tracing/
	cd $(DEPLOY_TEST) && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags alerting ./...
	cd $(DEPLOY_TEST) && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags apiserver ./apiserver/
	-$(GO) run golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) ./...

## bench: the hot path next to a bare httputil.ReverseProxy, and the policy engine
bench:
	$(GO) test -run '^TestAllocsPer(Unsampled)?Request$$' -bench . -benchmem -count 5 ./proxy/ ./policy/

## pgo: merge the CPU profiles in PROFILES (taken under the bench rig's list,
## dl64k and up1m loads, admin.pprof: true) into cmd/faxgate/default.pgo,
## which every go build of ./cmd/faxgate then uses (profile-guided optimization)
pgo:
	@test -n "$(PROFILES)" || { echo 'usage: make pgo PROFILES="list.prof dl64k.prof up1m.prof"'; exit 1; }
	$(GO) tool pprof -proto $(PROFILES) > cmd/faxgate/default.pgo

## fuzz: every native fuzz target of every package (found with go test
## -list, so a new one is never left out) for FUZZTIME each
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz: $$pkg $$target"; \
	    $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## tidy-check: go mod tidy leaves no diff, in every module
tidy-check:
	$(GO) mod tidy
	for m in $(DEPLOY_TEST) $(TOOL_MODULES); do (cd $$m && $(GO) mod tidy) || exit 1; done
	git diff --exit-code -- go.mod go.sum $(foreach m,$(DEPLOY_TEST) $(TOOL_MODULES),$(m)/go.mod $(m)/go.sum)

## check-example: the shipped example configuration is valid
check-example:
	FAXGATE_API_KEY=example $(GO) run ./cmd/faxgate check --config config.example.yaml

clean:
	rm -rf bin
