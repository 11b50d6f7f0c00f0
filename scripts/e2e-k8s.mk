# e2e-k8s: prove the kubernetes pod driver, and the whole service routing through it, on
# a real kube-apiserver and a real redis-server.
# Include from the Makefile:   include scripts/e2e-k8s.mk
#
# scripts/k8s-up.sh builds etcd + kube-apiserver + kube-scheduler + kwok once into
# K8S_CACHE (about 5 min cold on 2 cores; later runs start in seconds) and starts them on
# loopback; the tests get its kubeconfig through WARMPOOL_KUBECONFIG and a throwaway
# redis-server through REDIS_ADDR (scripts/with-redis.sh, which stops it afterwards);
# k8s-down.sh stops exactly what up started, whether the tests pass, fail or are
# interrupted.
K8S_CACHE ?= $(HOME)/.cache/warmpool-k8s
E2E_K8S_FLAGS ?= -count=1 -timeout 10m

.PHONY: e2e-k8s k8s-up k8s-down
e2e-k8s: build
	@trap 'bash scripts/k8s-down.sh "$(K8S_CACHE)"' EXIT INT TERM; \
	out=$$(bash scripts/k8s-up.sh "$(K8S_CACHE)") || exit 1; \
	kc=$$(printf '%s\n' "$$out" | tail -n 1); \
	echo "kubeconfig: $$kc"; \
	WARMPOOL_KUBECONFIG="$$kc" bash scripts/with-redis.sh go test -tags e2e_k8s -race $(E2E_K8S_FLAGS) ./e2e/k8s/...

# k8s-up / k8s-down: the same control plane for hand testing (kubectl --kubeconfig …).
k8s-up:
	@bash scripts/k8s-up.sh "$(K8S_CACHE)"
k8s-down:
	@bash scripts/k8s-down.sh "$(K8S_CACHE)"

# bench-k8s: cold-route bursts through built replicas on a rig whose scheduler's QPS is
# raised (1000) and whose API server runs priority and fairness, as docs/performance.md
# reports them (e2e/k8s/bench_test.go). BENCH_K8S_RUNS picks the runs
# (REPLICAS:BURST:SCOPES[:sa],...; default the whole matrix); the table goes to
# BENCH_K8S_OUT. The rig is restarted with those knobs and stopped afterwards.
BENCH_K8S_RUNS ?=
BENCH_K8S_OUT ?= $(CURDIR)/bin/bench-k8s.md
.PHONY: bench-k8s
bench-k8s: build
	@trap 'bash scripts/k8s-down.sh "$(K8S_CACHE)"' EXIT INT TERM; \
	bash scripts/k8s-down.sh "$(K8S_CACHE)"; \
	out=$$(WP_APF=1 WP_SCHEDULER_QPS=1000 bash scripts/k8s-up.sh "$(K8S_CACHE)") || exit 1; \
	kc=$$(printf '%s\n' "$$out" | tail -n 1); \
	WARMPOOL_KUBECONFIG="$$kc" BENCH_K8S_RUNS="$(BENCH_K8S_RUNS)" BENCH_K8S_OUT="$(BENCH_K8S_OUT)" \
	bash scripts/with-redis.sh go test -tags e2e_k8s,bench_k8s -count=1 -timeout 90m -run '^TestBenchK8s$$' -v ./e2e/k8s/
