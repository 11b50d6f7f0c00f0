#!/usr/bin/env bash
# with-redis.sh CMD... — run CMD with REDIS_ADDR pointing at a fresh redis-server that
# is stopped afterwards, whatever CMD does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/warmpool-redis.XXXXXX")
addr=$("$here/redis.sh" start "$dir")
trap '"$here/redis.sh" stop "$dir"; rm -rf "$dir"' EXIT
echo "with-redis: redis-server at $addr" >&2
REDIS_ADDR=$addr "$@"
