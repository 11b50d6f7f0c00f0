#!/usr/bin/env bash
# k8s-up.sh CACHE_DIR — build (once, cached in CACHE_DIR) and start a real single-node
# Kubernetes control plane on loopback for warmpool's e2e tests: etcd + kube-apiserver +
# kube-scheduler + kwok (a fake kubelet: pods on its fake node go Running/Ready and get a
# pod IP from 127.1.0.0/16, a real loopback address a test can listen on).
# The last line of stdout is the kubeconfig path (static admin token, system:masters).
# Stop with k8s-down.sh CACHE_DIR, which stops only what this script started.
#
# Needs go, openssl, curl, jq. Logs: $RUN/<name>.log. Every binary comes from the Go module
# proxy: a throwaway module requires k8s.io/kubernetes and replaces each of its ./staging
# modules with the published k8s.io/x v0.Y.Z; etcd and kwok live in the same module.
#
# Env knobs (defaults in brackets):
#   WP_K8S_VERSION [v1.37.2]  WP_KWOK_VERSION [v0.8.0]  WP_ETCD_VERSION [what kubernetes pins]
#   WP_ETCD_PORT [23790]  WP_ETCD_PEER_PORT [23800]  WP_APISERVER_PORT [16443]
#   WP_POD_CIDR [127.1.0.0/16]  WP_NODE_NAME [kwok-node-0]  WP_K8S_RUN [CACHE_DIR/run]
#   WP_NO_SCHEDULER=1 (skip the scheduler)  WP_WITH_KCM=1 (also kube-controller-manager)
#   WP_BUILD_ONLY=1 (build the binaries and exit)
#   WP_SCHEDULER_QPS=N (the scheduler's client QPS, burst 2N; default its own 50/100, which
#     caps binding a burst of pods at 50/s)
#   WP_APF=1 (API priority and fairness on: a ServiceAccount's requests are queued and
#     refused with 429 + Retry-After past its priority level's share; the admin token is
#     system:masters, exempt either way)
# Admission: the defaults, ServiceAccount included (a pod naming a missing service account
# is refused), so a namespace needs its "default" ServiceAccount before a pod that names
# none is admitted: no controller manager runs to create it (WP_WITH_KCM=1 does). A
# ResourceQuota is enforced only once its status holds hard and used, which the quota
# controller (kube-controller-manager) writes.
# Test knobs of the kwok pod-ready stage:
#   annotation k8srig.io/hold (any value)          the pod stays Pending while it is present
#   annotation pod-ready.stage.kwok.x-k8s.io/delay  e.g. "3s": Ready only after that delay
set -euo pipefail
CACHE=$(mkdir -p "${1:?usage: k8s-up.sh CACHE_DIR}" && cd "$1" && pwd -P)
RUN=${WP_K8S_RUN:-$CACHE/run}
K8S_VERSION=${WP_K8S_VERSION:-v1.37.2}
KWOK_VERSION=${WP_KWOK_VERSION:-v0.8.0}
ETCD_VERSION=${WP_ETCD_VERSION:-}
ETCD_PORT=${WP_ETCD_PORT:-23790}
ETCD_PEER_PORT=${WP_ETCD_PEER_PORT:-23800}
APISERVER_PORT=${WP_APISERVER_PORT:-16443}
POD_CIDR=${WP_POD_CIDR:-127.1.0.0/16}
NODE_NAME=${WP_NODE_NAME:-kwok-node-0}
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
BIN=$CACHE/bin SRC=$CACHE/src
HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "[k8s-up] $*" >&2; }
fail() { # what logname: show the log tail, stop whatever this run started, exit 1
  log "FAILED: $1"; tail -30 "$RUN/$2.log" >&2 || true; bash "$HERE/k8s-down.sh" "$CACHE"; exit 1; }
for tool in go openssl curl jq; do command -v "$tool" >/dev/null || { log "missing tool: $tool"; exit 1; }; done

# ---------- 1. build (once; the stamp records the versions built) ----------
STAMP="$K8S_VERSION $KWOK_VERSION $ETCD_VERSION"
build() {
  local t0 sv kmod kld kw
  t0=$(date +%s)
  rm -rf "$SRC" "$BIN"; mkdir -p "$SRC" "$BIN"; cd "$SRC"
  sv=v0.${K8S_VERSION#v1.}   # staging modules: v1.37.2 -> v0.37.2
  printf 'module wpk8srig\n\ngo 1.26.0\n' > go.mod
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
  kmod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod
  [ -n "$ETCD_VERSION" ] || ETCD_VERSION=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$kmod")
  # each "k8s.io/x => ./staging/src/k8s.io/x" of kubernetes' go.mod -> the published k8s.io/x v0.Y.Z
  { echo 'replace ('
    awk -v sv="$sv" '$2=="=>" && $3 ~ /^\.\/staging\// {print "\t" $1 " => " $1 " " sv}' "$kmod"
    echo ')'; } >> go.mod
  cat > tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
EOF
  go get "k8s.io/kubernetes@$K8S_VERSION" "sigs.k8s.io/kwok@$KWOK_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  go mod tidy >&2
  kld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
  kld="$kld -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
  log "building kube-apiserver $K8S_VERSION (about 5 min cold on 2 cores)"
  go build -trimpath -ldflags "$kld" -o "$BIN/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  log "building kube-scheduler, etcd $ETCD_VERSION, kwok $KWOK_VERSION"
  go build -trimpath -ldflags "$kld" -o "$BIN/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
  go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok
  # kwok's stages (its fake-kubelet behaviour) ship in its module: node-initialize plus the pod
  # "fast" stages. pod-ready gets the two test knobs described at the top of this file.
  kw=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  { cat "$kw"/node/fast/node-initialize.yaml; echo '---'
    awk '/^    matchExpressions:$/ && !h {print; print "    - key: '"'"'.metadata.annotations[\"k8srig.io/hold\"]'"'"'"; print "      operator: '"'"'DoesNotExist'"'"'"; h=1; next}
         /^  next:$/ {print "  delay:"; print "    durationMilliseconds: 0"; print "    durationFrom:"
                      print "      expressionFrom: '"'"'.metadata.annotations[\"pod-ready.stage.kwok.x-k8s.io/delay\"]'"'"'"}
         {print}' "$kw"/pod/fast/pod-ready.yaml; echo '---'
    cat "$kw"/pod/fast/pod-complete.yaml; echo '---'; cat "$kw"/pod/fast/pod-delete.yaml
  } > "$BIN/kwok-stages.yaml"
  grep -q 'k8srig.io/hold' "$BIN/kwok-stages.yaml" || { log "kwok pod-ready stage changed shape; knobs not applied"; exit 1; }
  echo "$STAMP" > "$BIN/.stamp"
  log "build done in $(( $(date +%s) - t0 ))s"
}
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9   # two concurrent up.sh runs must not build into the same directory
if [ "$(cat "$BIN/.stamp" 2>/dev/null)" != "$STAMP" ]; then (build); fi
if [ "${WP_WITH_KCM:-0}" = 1 ] && [ ! -x "$BIN/kube-controller-manager" ]; then
  (cd "$SRC" && go build -trimpath -ldflags "-s -w" -o "$BIN/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager)
fi
flock -u 9
[ "${WP_BUILD_ONLY:-0}" != 1 ] || { log "binaries ready in $BIN"; exit 0; }

# ---------- 2. refuse to double-start ----------
mkdir -p "$RUN"
for p in etcd kube-apiserver kube-scheduler kube-controller-manager kwok; do
  if [ -f "$RUN/$p.pid" ] && kill -0 "$(cat "$RUN/$p.pid")" 2>/dev/null; then
    log "$p already running (pid $(cat "$RUN/$p.pid")); reusing it (k8s-down.sh to stop)"; echo "$RUN/kubeconfig"; exit 0
  fi
done
t0=$(date +%s.%N)

# ---------- 3. PKI and auth (generated once per RUN dir) ----------
P=$RUN/pki; mkdir -p "$P"; chmod 700 "$P"
if [ ! -f "$P/token" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=warmpool-k8s-ca \
    -keyout "$P/ca.key" -out "$P/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
    -keyout "$P/apiserver.key" -out "$P/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' > "$P/ext.cnf"
  openssl x509 -req -in "$P/apiserver.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
    -days 3650 -extfile "$P/ext.cnf" -out "$P/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$P/sa.key" 2048 2>/dev/null      # ServiceAccount token signing key
  openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$P/token.tmp"
  echo "$(cat "$P/token.tmp"),admin,admin,system:masters" > "$P/tokens.csv"   # static bearer token
  mv "$P/token.tmp" "$P/token"
fi
TOKEN=$(cat "$P/token")
KC=$RUN/kubeconfig
cat > "$KC" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: warmpool-k8s
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 < "$P/ca.crt")
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: warmpool-k8s
  context: {cluster: warmpool-k8s, user: admin, namespace: default}
current-context: warmpool-k8s
EOF
chmod 600 "$KC"

start() { # name cmd...
  local name=$1; shift
  nohup "$@" > "$RUN/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
}
wait_for() { # what seconds cmd...   (gives up early when process "what" has died)
  local what=$1 n=$(( $2 * 10 )); shift 2
  for _ in $(seq "$n"); do
    "$@" >/dev/null 2>&1 && return 0
    [ ! -f "$RUN/$what.pid" ] || kill -0 "$(cat "$RUN/$what.pid")" 2>/dev/null || { log "$what exited"; return 1; }
    sleep 0.1
  done
  log "timeout waiting for $what"; return 1
}

# ---------- 4. etcd (fresh data dir on every start) ----------
rm -rf "$RUN/etcd-data"
start etcd "$BIN/etcd" --name wpk8s --data-dir "$RUN/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "wpk8s=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health" || fail etcd etcd

# ---------- 5. kube-apiserver ----------
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
  --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
  --token-auth-file "$P/tokens.csv" --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
  --disable-admission-plugins TaintNodesByCondition \
  --enable-priority-and-fairness="$([ "${WP_APF:-0}" = 1 ] && echo true || echo false)" --profiling=false --v=1
wait_for kube-apiserver 90 curl -sf --cacert "$P/ca.crt" -H "Authorization: Bearer $TOKEN" \
  "https://127.0.0.1:$APISERVER_PORT/readyz" || fail kube-apiserver kube-apiserver

# ---------- 6. kube-scheduler (optional), kube-controller-manager (optional), kwok ----------
if [ "${WP_NO_SCHEDULER:-0}" = 1 ]; then :
elif [ -n "${WP_SCHEDULER_QPS:-}" ]; then
  cat > "$RUN/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$KC", qps: $WP_SCHEDULER_QPS, burst: $(( 2 * WP_SCHEDULER_QPS ))}
leaderElection: {leaderElect: false}
enableProfiling: false
EOF
  start kube-scheduler "$BIN/kube-scheduler" --config "$RUN/scheduler.yaml" --secure-port 0 --v=1
else
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$KC" --leader-elect=false \
    --secure-port 0 --profiling=false --v=1
fi
if [ "${WP_WITH_KCM:-0}" = 1 ]; then
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$KC" --leader-elect=false \
    --secure-port 0 --controllers namespace,garbagecollector,serviceaccount,replicaset,deployment \
    --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" --v=1
fi
start kwok "$BIN/kwok" --kubeconfig "$KC" --config "$BIN/kwok-stages.yaml" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --cidr "$POD_CIDR" --node-ip 127.0.0.1

# ---------- 7. the fake node (kwok marks it Ready) ----------
API=(curl -sf --cacert "$P/ca.crt" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json')
"${API[@]}" -X POST "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes" -d @- >/dev/null <<EOF || fail "create node" kube-apiserver
{"apiVersion":"v1","kind":"Node","metadata":{"name":"$NODE_NAME",
 "annotations":{"kwok.x-k8s.io/node":"fake"},
 "labels":{"type":"kwok","kubernetes.io/hostname":"$NODE_NAME","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64"}},
 "spec":{}}
EOF
node_ready() { "${API[@]}" "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$NODE_NAME" \
  | jq -e '.status.conditions[]? | select(.type=="Ready" and .status=="True")'; }
wait_for kwok 60 node_ready || fail "node Ready" kwok
log "up in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s; pids: $(cat "$RUN"/*.pid | tr '\n' ' ')"
echo "$KC"
