# sloprober build, test and run targets. Every target installs what it needs
# (Go modules through the Go module proxy); nothing has to be set up by hand.

GO        ?= go
BINARY    ?= sloprober
PKG       := github.com/prometheus/common/version
VERSION   ?= $(shell cat VERSION)
REVISION  ?= $(shell git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git symbolic-ref --short -q HEAD 2>/dev/null || echo unknown)
BUILDUSER ?= $(shell whoami)@$(shell hostname)
# The last commit's date, not now: an unchanged tree builds the same binary,
# which `go build` then does not link again (`make demo`, `make run`).
BUILDDATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d-%H:%M:%S 2>/dev/null || date -u +%Y%m%d-%H:%M:%S)
LDFLAGS   := -X $(PKG).Version=$(VERSION) -X $(PKG).Revision=$(REVISION) \
             -X $(PKG).Branch=$(BRANCH) -X $(PKG).BuildUser=$(BUILDUSER) \
             -X $(PKG).BuildDate=$(BUILDDATE)
GOFILES   := $(shell find . -name '*.go' -not -path './.git/*' -not -path './.tools/*')

# Tools the tests run, installed by `make` itself from the Go module proxy.
# github.com/prometheus/prometheus v0.316.0 is Prometheus 3.x's module.
TOOLS            := $(CURDIR)/.tools/bin
PROMETHEUS_MOD   ?= v0.316.0
PROMTOOL         := $(TOOLS)/promtool
# Jaeger v2, the trace backend of the tracing tests. It is pinned in the
# separate tools/ module, so its dependencies do not move sloprober's.
JAEGER           := $(TOOLS)/jaeger

.PHONY: all build test test-busy fmt-check vet unit fuzz run sim tools prometheus chromium jaeger bench bench-long bench-capacity bench-compare dashboard-pictures clean

all: build

## build: build ./sloprober with version information
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BINARY) ./cmd/sloprober

## test: gofmt check, go vet, every test with the race detector, then every fuzz target briefly
test: fmt-check vet unit fuzz

## test-busy: make test beside a CPU burner holding every core (internal/testkit/cpuburn), as on a busy machine; about twice as long
# The burner is a process of its own: the trap stops it however make test
# ends (pass, fail, Ctrl-C), and it stops itself if this shell is killed.
# BURN_CPUS busy goroutines, one per core by default.
BURN_CPUS ?=
test-busy:
	$(GO) build -o $(TOOLS)/cpuburn ./internal/testkit/cpuburn
	@$(TOOLS)/cpuburn $(if $(BURN_CPUS),-cpus $(BURN_CPUS)) & burner=$$!; \
	trap 'kill $$burner 2>/dev/null; wait $$burner 2>/dev/null' EXIT; \
	trap 'exit 130' INT; trap 'exit 143' TERM; \
	$(MAKE) test

fmt-check:
	@unformatted=$$(gofmt -l $(GOFILES)); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi

vet:
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...

# The rules' end-to-end test runs Prometheus and sloprober for a minute, and
# the step test's ground truth an M/D/c simulator for a minute and a half;
# they run after the other packages, one after the other, so that they do
# not compete for the CPU with the tests that check timing.
SOLO := /rules$$|/capacity/groundtruth$$
# TEST_TIMEOUT is a package's limit: go test's default of 10 minutes is
# less than capacity's simulation study takes beside a burner of 4 busy
# goroutines a core (make test-busy BURN_CPUS=8 on 2 cores: over 10
# minutes; 6 beside the other packages on a quiet one). A hang still ends
# well inside CI's 90.
TEST_TIMEOUT ?= 30m
# The packages that read streams run a second time with the standard
# reader (--prober.reader=std, internal/testkit/readertest): the client's
# tests against the simulator and the hostile servers. About a minute.
STD_READER_PACKAGES := ./prober/ ./internal/testkit/hostile/
unit: $(PROMTOOL) $(JAEGER) prometheus chromium
	PROMTOOL=$(PROMTOOL) JAEGER=$(JAEGER) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -Ev '$(SOLO)')
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./capacity/groundtruth/
	SLOPROBER_TEST_READER=std $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(STD_READER_PACKAGES)
	PROMTOOL=$(PROMTOOL) JAEGER=$(JAEGER) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./rules/
	cd deploy && GO=$(GO) PROMTOOL=$(PROMTOOL) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

## fuzz: run every fuzz target for FUZZTIME (default 20000x: executions, a few seconds) each
FUZZTIME ?= 20000x
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

## dashboard-pictures: draw docs/images/dashboard-*.png: sloprober on its embedded default for 8 minutes (DASHBOARD_MINUTES), scraped every 2 s by a real Prometheus, its step test run and a minute and a half of errors, then both dashboards drawn by sloprober's own charts (Grafana cannot run here) and shown in Chromium
DASHBOARD_MINUTES ?= 8
dashboard-pictures: prometheus chromium
	SLOPROBER_DASHBOARD_PICTURES=$(CURDIR)/docs/images SLOPROBER_DASHBOARD_MINUTES=$(DASHBOARD_MINUTES) \
		$(GO) test -count=1 -timeout 30m -run 'TestDashboardPictures$$' -v ./rules/

## tools: install the tools the tests need: promtool 3.x and Jaeger v2 into .tools/bin, Prometheus 2.42, Chromium
tools: $(PROMTOOL) $(JAEGER) prometheus chromium

## prometheus: install Debian's Prometheus 2.42 (server and promtool) unless it is on the PATH
prometheus:
	@scripts/install-prometheus.sh >/dev/null

## chromium: install Debian's Chromium unless it is on the PATH (the HTML report tests render in it)
chromium:
	@scripts/install-chromium.sh >/dev/null

$(PROMTOOL):
	GOBIN=$(TOOLS) $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_MOD)

## jaeger: build Jaeger v2 into .tools/bin (the version tools/go.mod pins; the first build takes minutes)
jaeger: $(JAEGER)

# Jaeger's go.mod has a replace directive, which `go install pkg@version`
# refuses; building the tool from the tools module is the way round that.
$(JAEGER): tools/go.mod tools/go.sum
	cd tools && $(GO) build -o $(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger

# The container image (Dockerfile). IMAGE is its tag; GO_IMAGE the build
# stage's base (pin a digest here: GO_IMAGE=golang:1.26-bookworm@sha256:...);
# CONTAINER_BUILDER docker, podman or buildah (default: the first of them on
# the PATH that answers `info`). The version build args are those of `build`.
IMAGE             ?= sloprober:$(VERSION)
GO_IMAGE          ?= golang:1.26-bookworm
CONTAINER_BUILDER ?=

.PHONY: image demo

## image: build the container image $(IMAGE); without a working docker, podman or buildah, say so and exit 0
image:
	@builder='$(CONTAINER_BUILDER)'; \
	if [ -z "$$builder" ]; then \
	  for b in docker podman buildah; do \
	    command -v $$b >/dev/null 2>&1 || continue; \
	    if timeout 20 $$b info >/dev/null 2>&1; then builder=$$b; break; fi; \
	    echo "make image: $$b is on the PATH but \`$$b info\` fails (no daemon or no permission): skipping it"; \
	  done; \
	fi; \
	if [ -z "$$builder" ]; then \
	  echo "make image: no working container builder (docker, podman or buildah): $(IMAGE) not built."; \
	  echo "make image: the Dockerfile and the binary it builds are checked without one by the deploy module's tests (make unit)."; \
	  exit 0; \
	fi; \
	case "$$builder" in buildah) sub=bud ;; *) sub=build ;; esac; \
	set -x; \
	"$$builder" $$sub -f Dockerfile -t '$(IMAGE)' \
	  --build-arg GO_IMAGE='$(GO_IMAGE)' \
	  --build-arg VERSION='$(VERSION)' --build-arg REVISION='$(REVISION)' \
	  --build-arg BRANCH='$(BRANCH)' --build-arg BUILDUSER='$(BUILDUSER)' \
	  --build-arg BUILDDATE='$(BUILDDATE)' \
	  .

## demo: the compose stack (deploy/compose) as processes here: simulator, sloprober, Prometheus, Grafana if installed; Ctrl-C stops it
demo: build
	SLOPROBER_BIN=./$(BINARY) exec scripts/demo.sh

.PHONY: deploy-generate

## deploy-generate: write the copies of rules/, dashboards/, the default configuration and VERSION that deploy/kubernetes and deploy/helm hold (deploy's tests fail when one drifts)
deploy-generate:
	cd deploy && $(GO) run ./cmd/k8sgen

## run: start the daemon on its embedded default: probing a built-in simulator, /metrics on :9477
run: build
	./$(BINARY) run

## bench: hot-path micro-benchmarks, then the end-to-end load benchmark (about 4 minutes; results in bench.json)
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./prober/ ./exporter/
	./$(BINARY) bench --log.level=warn --json bench.json

## bench-capacity: the step test's profile (BENCH_PROFILE, default sign) run as a user runs it against M/D/c simulators, set against their queueing model: BENCH_RUNS runs (default 10) of each regime of BENCH_REGIMES (a: 8 slots of 1.35 s; b: 32 slots of 0.146 s; c: a beside a CPU burner), one after the other, then 10 soaks each of an unchanged and a degrading simulator (hours; the tables in bench-capacity.md and bench-soak.md)
BENCH_RUNS    ?= 10
BENCH_PROFILE ?= sign
BENCH_REGIMES ?= a,b,c
bench-capacity:
	SLOPROBER_BENCH_CAPACITY=$(BENCH_RUNS) SLOPROBER_BENCH_PROFILE=$(BENCH_PROFILE) SLOPROBER_BENCH_REGIMES=$(BENCH_REGIMES) SLOPROBER_BENCH_CAPACITY_OUT=$(CURDIR)/bench-capacity.md \
		$(GO) test -count=1 -v -timeout 48h -run '^TestCapacityRegimes$$' ./capacity/groundtruth/
	SLOPROBER_BENCH_SOAK=10 SLOPROBER_BENCH_SOAK_OUT=$(CURDIR)/bench-soak.md $(GO) test -count=1 -v -timeout 2h -run '^TestSoakBenchmark$$' ./capacity/groundtruth/

## bench-compare: BENCH_PAIRS pairs (default 10) of the same step test against one unchanged simulator, each pair compared as report compare does: the pairs not told apart on every row (target 9 of 10; about an hour; the table in bench-compare.md)
BENCH_PAIRS ?= 10
bench-compare:
	SLOPROBER_BENCH_COMPARE=$(BENCH_PAIRS) SLOPROBER_BENCH_COMPARE_OUT=$(CURDIR)/bench-compare.md $(GO) test -count=1 -v -timeout 3h -run '^TestCompareBenchmark$$' ./cmd/sloprober/

## bench-long: schedule fidelity, 10 minutes of Poisson arrivals at 500 req/s; 10 minutes of toggled faults with a live-heap bound
bench-long: build
	./$(BINARY) bench --long --log.level=warn --json bench-long.json
	SLOPROBER_FAULT_RUN=10m $(GO) test -count=1 -v -run '^TestToggledFaults$$' -timeout 15m ./exporter/

## sim: start the simulator on 127.0.0.1:8000
sim: build
	./$(BINARY) sim

clean:
	rm -rf $(BINARY) .tools
