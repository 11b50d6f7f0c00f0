#!/usr/bin/env bash
# with-redis-cluster.sh CMD... — run CMD with REDIS_CLUSTER_ADDRS naming a fresh
# 3-master Redis Cluster that is stopped afterwards, whatever CMD does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/warmpool-cluster.XXXXXX")
addrs=$("$here/redis-cluster.sh" start "$dir")
trap '"$here/redis-cluster.sh" stop "$dir"; rm -rf "$dir"' EXIT
echo "with-redis-cluster: cluster at $addrs" >&2
REDIS_CLUSTER_ADDRS=$addrs "$@"
