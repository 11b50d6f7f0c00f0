# warmpool — see README.md. Every target works on a fresh Debian machine with Go.
GO      ?= go
BIN     := bin/warmpool
PKGS    := ./...
MODULE  := github.com/warmpool/warmpool
# Tests that start the built binary find it here.
export WARMPOOL_BIN := $(CURDIR)/$(BIN)

.PHONY: all build run test unit soak bench pgo scale pooltrace bigscope tenants quotacost lint e2e faults image image-test clean

all: lint test

build:
	$(GO) build -o $(BIN) ./cmd/warmpool

## run: the service with an embedded Redis, the local pod driver and a ready `demo` scope
run: build
	$(BIN) serve --dev

## test: every test on a real redis-server and a real PostgreSQL server started (and
## stopped) for the run, after the Redis-facing packages on miniredis (the same suite,
## both servers). The tests that start warmpool processes run a -race build of it
## (RACE_BIN), which also shares every compiled package with the -race tests; go vet
## runs in make lint, not a second time here.
REDIS_PKGS := ./redisstore/ ./rm/ ./sm/ ./sweeper/
RACE_BIN   := bin/warmpool-race
test:
	$(GO) build -race -o $(RACE_BIN) ./cmd/warmpool
	$(GO) test -race -vet=off -count=1 -short $(REDIS_PKGS)
	WARMPOOL_BIN=$(CURDIR)/$(RACE_BIN) scripts/with-postgres.sh scripts/with-redis.sh \
		$(GO) test -race -vet=off -count=1 $(PKGS)

## unit: the fast tests only, on miniredis
unit:
	$(GO) test -race -count=1 -short $(PKGS)

## soak: the model-based test of the scripts, much longer than in make test: many
## more runs (SOAK_CHECKS) of many more steps each (SOAK_STEPS), on a real redis-server;
## the model with the tenants' escrows (SOAK_TENANT_CHECKS runs of SOAK_STEPS: three
## tenants over four scopes); then the tenants' quota invariants over SOAK_QUOTA_STEPS
## random steps (three tenants, without and with a total cap)
SOAK_CHECKS ?= 3000
SOAK_STEPS  ?= 400
SOAK_TENANT_CHECKS ?= 300
SOAK_QUOTA_STEPS ?= 100000
soak:
	scripts/with-redis.sh $(GO) test -count=1 -run '^TestScriptsFollowTheModel$$' ./internal/testing/model/ \
		-rapid.checks=$(SOAK_CHECKS) -model.steps=$(SOAK_STEPS) -timeout 2h
	scripts/with-redis.sh $(GO) test -count=1 -run '^TestEscrowsFollowTheModel$$' ./internal/testing/model/ \
		-rapid.checks=$(SOAK_TENANT_CHECKS) -model.steps=$(SOAK_STEPS) -timeout 1h
	scripts/with-redis.sh $(GO) test -count=1 -run '^(TestTenantQuotasHoldAtEveryStep|TestTotalCapHoldsAtEveryStep)$$' \
		./redisstore/ -quota.steps=$(SOAK_QUOTA_STEPS) -timeout 1h -v

## bench: benchmarks against a real redis-server
bench:
	scripts/with-redis.sh $(GO) test -run '^$$' -bench . -benchmem -count=1 ./rm/ ./sm/ ./server/

## pgo: refresh cmd/warmpool/default.pgo, the CPU profile `go build` optimises the
## binary with (profile-guided optimisation; docs/performance.md, "Issue 25"): the warm
## routes of server (BenchmarkHTTPRouteAffinity, BenchmarkHTTPRouteWarm), rm's warm
## and cold acquires and the sweeper's due and watch ticks (BenchmarkSweepShards,
## BenchmarkWatch), on a real redis-server, merged. Refresh it when the hot paths
## change; `go build -pgo=off` builds without it.
PGO_DIR := bin/pgo
pgo:
	mkdir -p $(PGO_DIR)
	scripts/with-redis.sh $(GO) test -run '^$$' -bench '^BenchmarkHTTPRoute(Affinity|Warm)$$' -benchtime 30000x -count=1 \
		-o $(PGO_DIR)/server.test -cpuprofile $(CURDIR)/$(PGO_DIR)/server.prof ./server/
	scripts/with-redis.sh $(GO) test -run '^$$' -bench '^BenchmarkAcquire(Warm|Cold)$$' -benchtime 2000x -count=1 \
		-o $(PGO_DIR)/rm.test -cpuprofile $(CURDIR)/$(PGO_DIR)/rm.prof ./rm/
	scripts/with-redis.sh $(GO) test -run '^$$' -bench '^Benchmark(SweepShards|Watch)$$' -benchtime 200x -count=1 \
		-o $(PGO_DIR)/sweeper.test -cpuprofile $(CURDIR)/$(PGO_DIR)/sweeper.prof ./sweeper/
	$(GO) tool pprof -proto $(PGO_DIR)/server.prof $(PGO_DIR)/rm.prof $(PGO_DIR)/sweeper.prof > cmd/warmpool/default.pgo

## scale: the scale benchmark (docs/performance.md): for each size (SCALE_SIZES, default
## 1000,10000,50000,100000 scopes of one pod and one session) a throwaway redis-server and
## one fake-driver replica, an idle window and a window of steady routing (SCALE_IDLE,
## SCALE_ROUTE: 60s each) with the replica's RSS and Redis's memory per scope, then route
## latency during full passes against sweeps off, and the RSS from 0 to 100,000
## sessions; the tables on stdout (an hour or more; 100,000 scopes take ~1.1 GB of RAM,
## 0.46 GB in Redis and 0.65 GB in the replica). Not part of make test.
scale: build
	scripts/perf.sh scale

## pooltrace: the warm-pool traces (docs/performance.md, "Demand-driven warm pools"):
## steady, ramp, step, diurnal and bursty arrivals replayed at once against static
## min_idle_pods 0, 1, 2, 4, 8 and warm_policy demand on one fake-driver replica with
## 2 s deploys; the table and the goals on stdout, the plot in docs/pooltrace.svg.
## About 4 minutes. Not part of make test.
pooltrace: build
	$(GO) build -o bin/wpbench ./scripts/wpbench
	bin/wpbench pooltrace --svg docs/pooltrace.svg

## bigscope: one scope as big as a cluster (docs/performance.md, "Issue 33"): on a fresh
## redis-server and fake-driver replica per run, one scope of 10, 1,000 and 10,000 pods
## at pod_concurrency 1 and 8, the Redis commands and CPU of a warm route, a release, a
## warm acquire, a hold release and a cold route, and route p50/p99; then cold bursts of
## 5,000 routes into one empty scope at 500/s and 2,000/s with 2 s deploys. The table on
## stdout, the figures in BIGSCOPE_OUT/bigscope.json; last, an idle scope of 10,000 warm
## pods left alone a minute, sweeps on. About 8 minutes. Not part of make test.
BIGSCOPE_OUT ?= bin/bigscope
bigscope: build
	$(GO) build -o bin/wpbench ./scripts/wpbench
	bin/wpbench bigscope --out $(BIGSCOPE_OUT)

## tenants: three tenants of weights 1/1/2 under --max-pods-total 60 on a fresh
## redis-server and fake-driver replica (docs/performance.md, "Tenants"): the two quiet
## ones offering 5 sessions a second each alone, then with a loud one offering 10 times
## that; routes by outcome, p50/p99, warm share and pods held per tenant. About a
## minute. Not part of make test.
TENANTS_OUT ?= bin/tenants
tenants: build
	$(GO) build -o bin/wpbench ./scripts/wpbench
	bin/wpbench tenants --out $(TENANTS_OUT)

## quotacost: what the tenants' quota check adds to a route (docs/performance.md,
## "What the quota check costs a route"): 3 fake-driver replicas on one redis-server,
## 30 scopes of warm pods over three tenants, 2,500 new sessions a second round robin
## over the replicas, without quotas, with quotas far above the use, and under
## --max-pods-total too; p50/p99/p99.9 and Redis per call. About two minutes. Not part
## of make test.
QUOTACOST_OUT ?= bin/quotacost
quotacost: build
	$(GO) build -o bin/wpbench ./scripts/wpbench
	bin/wpbench quotacost --out $(QUOTACOST_OUT) $(QUOTACOST_FLAGS)

## lint: formatting, vet, and no client-go in the tests of the packages that do not
## drive Kubernetes (only k8s/, cmd/warmpool and e2e/ may link k8s.io packages: not the
## root, not the driver registry nor the drivers of driver/); those
## that do link client-go's core/v1 client, never the clientset, informers or fake
## clientset of every API group (only e2e/k8s, built for make e2e-k8s, uses the clientset);
## the pod policy (podpolicy/) on Kubernetes' API types, apimachinery and Pod Security
## admission, with what they need (POLICY_K8S), never client-go; cmd/warmpool without
## drivers.go linking no k8s.io package the policy does not (a driver brings its own),
## and drivers.go holding one blank import per driver and nothing else;
## the root package free of net/http (the domain knows codes, not statuses); the Go
## client of gateways (client/) on the standard library alone, so that a gateway links
## nothing else through it;
## and no net/http/pprof in the binary: linking it keeps the runtime's memory profiling
## on (1.5 MB of a replica's RSS) for a profile nothing serves; sm and rm never import
## each other (SM takes a root interface, and cmd wires them); rm, sm and the sweeper log
## with the call's context (slog's InfoContext(ctx, …): a handler may read the request
## id from it); no package outside internal/testing/ links an internal/testing package
## but through its tests (the test tooling stays out of what ships); no non-test Go file
## is over MAX_LINES lines but the model of the scripts (internal/testing/model); and api/openapi.yaml passes Spectral's recommended OpenAPI rules
## (scripts/openapi-lint.sh with api/spectral.yaml; npm installs Spectral into
## ~/.cache/warmpool-lint the first time). vet, staticcheck and errcheck (every error
## checked, or discarded with `_ =` where a comment says why; the few calls it does not
## ask about are in scripts/errcheck-excludes.txt, each with why) read the files of every
## build tag too. The Helm chart (deploy/helm/warmpool) passes `helm lint --strict` and
## renders with `helm template`, at its defaults and with every optional value set
## (scripts/chart-values.yaml). These tools run at pinned versions through `go run
## tool@version`: their modules stay out of go.mod, and the go build cache keeps their
## binaries (helm's first build takes some minutes; deploy/'s tests render the chart
## with the same HELM, internal/testing/manifests.Helm).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
ERRCHECK    := github.com/kisielk/errcheck@v1.30.0
HELM        := helm.sh/helm/v4/cmd/helm@v4.3.2
CHART       := deploy/helm/warmpool
LINT_TAGS   := e2e_multi,faults,e2e_k8s,bench_k8s,heapprofile
NO_K8S_PKGS := . ./client/ ./e2b/ ./driver/... ./server/ ./rm/ ./sm/ ./sweeper/ ./ui/ ./loadtest/ ./redisstore/ ./scopes/ ./internal/testing/harness/testserver/
K8S_PKGS := ./cmd/warmpool/ ./k8s/... ./podpolicy/ ./internal/testing/manifests/ ./deploy/ ./e2e/
POLICY_PKG := ./podpolicy/
TESTING    := $(MODULE)/internal/testing
MAX_LINES  := 500
POLICY_K8S := k8s\.io/(api|apimachinery|pod-security-admission|component-base|klog|utils|kube-openapi)/
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags $(LINT_TAGS) $(PKGS)
	$(GO) run $(STATICCHECK) -tags $(LINT_TAGS) $(PKGS)
	$(GO) run $(ERRCHECK) -tags $(LINT_TAGS) -exclude scripts/errcheck-excludes.txt $(PKGS)
	@for p in $(NO_K8S_PKGS); do out=$$($(GO) list -test -deps $$p | grep '^k8s\.io/'); \
		if [ -n "$$out" ]; then echo "$$p links k8s.io packages in its tests, e.g.:"; echo "$$out" | head -3; exit 1; fi; done
	@out=$$($(GO) list -test -deps $(K8S_PKGS) | grep -E '^k8s\.io/client-go/(informers|kubernetes|kubernetes/fake)$$'); \
		if [ -n "$$out" ]; then echo "$(K8S_PKGS) link all of client-go's API groups through:"; echo "$$out"; exit 1; fi
	@out=$$($(GO) list -test -deps $(POLICY_PKG) | grep '^k8s\.io/' | grep -vE '^$(POLICY_K8S)'); if [ -n "$$out" ]; then \
		echo "$(POLICY_PKG) links more of k8s.io than the API types, apimachinery and Pod Security admission, e.g.:"; echo "$$out" | head -3; exit 1; fi
	@files=$$($(GO) list -f '{{range .GoFiles}}{{if ne . "drivers.go"}}{{$$.Dir}}/{{.}} {{end}}{{end}}' ./cmd/warmpool); \
		out=$$($(GO) list -deps $$files | grep '^k8s\.io/' | grep -vxF "$$($(GO) list -deps $(POLICY_PKG) | grep '^k8s\.io/')"); \
		if [ -n "$$out" ]; then echo "cmd/warmpool without drivers.go links k8s.io packages the pod policy does not (only a driver's import may bring them), e.g.:"; \
		echo "$$out" | head -3; exit 1; fi
	@out=$$(grep -vE '^(package main|import \(|\)|(import )?[[:space:]]*_ "[^"]+"|[[:space:]]*//.*|)$$' cmd/warmpool/drivers.go); \
		if [ -n "$$out" ]; then echo "cmd/warmpool/drivers.go holds more than one blank import per driver:"; echo "$$out"; exit 1; fi
	@if $(GO) list -deps . | grep -qx 'net/http'; then \
		echo "the root package links net/http: statuses and request decoding belong to internal/httpx"; exit 1; fi
	@out=$$($(GO) list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./client/ | grep -vx '$(MODULE)/client'); \
		if [ -n "$$out" ]; then echo "client/ links more than the standard library (gateways import it):"; echo "$$out"; exit 1; fi
	@out=$$($(GO) list -deps ./api/ | grep -E '^$(MODULE)(/|$$)' | grep -vxE '$(MODULE)(/internal/httpx|/api)?'); \
		if [ -n "$$out" ]; then echo "api/ links project packages other than the root and internal/httpx (the managers' answers are root types):"; echo "$$out"; exit 1; fi
	@if $(GO) list -deps ./cmd/warmpool | grep -qx 'net/http/pprof'; then \
		echo "cmd/warmpool links net/http/pprof, which keeps memory profiling on: drop the import that brings it"; exit 1; fi
	@for pair in sm:rm rm:sm; do from=$${pair%:*}; to=$${pair#*:}; \
		out=$$($(GO) list -deps ./$$from/... | grep -E "^$(MODULE)/$$to(/|$$)"); if [ -n "$$out" ]; then \
		echo "$$from imports $$to ($$out): they never import each other; take a root interface and wire them in cmd"; exit 1; fi; done
	@out=$$(grep -nE '\.(Debug|Info|Warn|Error)\("' $$(git ls-files 'rm/*.go' 'sm/*.go' 'sweeper/*.go' | grep -v '_test\.go$$')); \
		if [ -n "$$out" ]; then echo "log with the call's context (InfoContext(ctx, ...)), as rm, sm and the sweeper do:"; echo "$$out"; exit 1; fi
	@out=$$($(GO) list -tags $(LINT_TAGS) -f '{{.ImportPath}}: {{join .Deps " "}}' $(PKGS) | grep -v '^$(TESTING)/' | \
		tr ' ' '\n' | awk '/:$$/ {pkg = $$1} $$0 ~ "^$(TESTING)/" {print pkg, $$0}'); \
		if [ -n "$$out" ]; then echo "production packages link test tooling (only tests may import internal/testing):"; echo "$$out"; exit 1; fi
	@out=$$(git ls-files '*.go' | grep -v '_test\.go$$' | grep -v '^internal/testing/model/' | xargs wc -l | \
		awk '$$2 != "total" && $$1 > $(MAX_LINES)'); \
		if [ -n "$$out" ]; then echo "non-test Go files over $(MAX_LINES) lines (split them along what they hold):"; echo "$$out"; exit 1; fi
	scripts/openapi-lint.sh
	$(GO) run $(HELM) lint --strict $(CHART)
	$(GO) run $(HELM) lint --strict $(CHART) --values scripts/chart-values.yaml
	$(GO) run $(HELM) template warmpool $(CHART) --namespace warmpool >/dev/null
	$(GO) run $(HELM) template warmpool $(CHART) --namespace warmpool --values scripts/chart-values.yaml >/dev/null

## e2e: three replicas behind haproxy on one redis-server, then on a 3-master Redis
## Cluster, together with the whole Redis-facing suite and the black-box tests of
## e2e/ (the E2B SDK's among them: npm installs the SDK of e2e/e2b/package-lock.json
## into ~/.cache/warmpool-e2b the first time, scripts/e2b-sdk.sh); the replicas share
## one PostgreSQL config store
e2e: build
	scripts/with-postgres.sh $(GO) test -tags e2e_multi -count=1 -run TestMultiReplica ./e2e/
	scripts/with-postgres.sh scripts/with-redis-cluster.sh $(GO) test -tags e2e_multi -count=1 $(REDIS_PKGS) ./server/ ./e2e/

## faults: the fault matrix (docs/reliability.md): a real redis-server and three
## `warmpool serve` processes (fake driver, one state directory) on loopback, under
## kills, stops, Redis pauses, restarts and failovers and driver faults, each case
## ending with the SPEC §6 invariant checks; the replicas connect as the README's ACL
## user. The figures go to bin/faults/matrix.json and matrix.md.
faults: build
	FAULTS_OUT=$(CURDIR)/bin/faults $(GO) test -tags faults -count=1 -timeout 10m -v -run TestFaults ./e2e/

## image: the runtime image of the Dockerfile, built here without any registry: a
## static binary from the local Go toolchain, then podman (vfs storage) builds
## deploy/image/Containerfile FROM scratch around it
IMAGE     ?= localhost/warmpool:dev
IMAGE_CTX := bin/image
image:
	@command -v podman >/dev/null || { echo "make image: podman is missing (Debian: apt-get install podman)"; exit 1; }
	mkdir -p $(IMAGE_CTX)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(IMAGE_CTX)/warmpool ./cmd/warmpool
	cp /etc/ssl/certs/ca-certificates.crt $(IMAGE_CTX)/
	podman --storage-driver vfs build -f deploy/image/Containerfile -t $(IMAGE) $(IMAGE_CTX)

## image-test: build the image, check its user, entrypoint, size and files, and run the
## binary taken out of it to a passing /healthz
image-test: image
	scripts/image-test.sh $(IMAGE)

clean:
	rm -rf bin

include scripts/e2e-k8s.mk
