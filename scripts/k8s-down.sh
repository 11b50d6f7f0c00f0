#!/usr/bin/env bash
# k8s-down.sh CACHE_DIR — stop only the processes k8s-up.sh started: each PID file is
# honoured only while /proc/PID/exe is still the binary from CACHE_DIR/bin (no PID reuse
# accidents). Safe to run twice or when nothing runs. The build cache is kept.
set -uo pipefail
CACHE=$(cd "${1:?usage: k8s-down.sh CACHE_DIR}" 2>/dev/null && pwd -P) || exit 0
RUN=${WP_K8S_RUN:-$CACHE/run}
for p in kwok kube-controller-manager kube-scheduler kube-apiserver etcd; do   # reverse start order
  f=$RUN/$p.pid; [ -f "$f" ] || continue
  pid=$(cat "$f")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  if kill -0 "$pid" 2>/dev/null && { [ "$exe" = "$CACHE/bin/$p" ] || [ "$exe" = "$CACHE/bin/$p (deleted)" ]; }; then
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then echo "[k8s-down] $p ($pid) ignored SIGTERM; SIGKILL" >&2; kill -KILL "$pid"; fi
    echo "[k8s-down] stopped $p ($pid)" >&2
  elif kill -0 "$pid" 2>/dev/null; then
    echo "[k8s-down] $p: pid $pid is no longer our binary; left alone" >&2
  fi
  rm -f "$f"
done
rm -rf "$RUN/etcd-data"
