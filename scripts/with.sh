#!/usr/bin/env bash
# with.sh SERVER VAR CMD... — start a throwaway server with scripts/SERVER.sh (redis,
# redis-cluster, postgres) in a fresh directory, run CMD with VAR set to the address it
# prints, and stop the server (and remove its data) afterwards, whatever CMD does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
server=$1 var=$2
shift 2
dir=$(mktemp -d "${TMPDIR:-/tmp}/warmpool-$server.XXXXXX")
trap '"$here/$server.sh" stop "$dir"; rm -rf "$dir"' EXIT
addr=$("$here/$server.sh" start "$dir")
echo "with $server: $var=$addr" >&2
env "$var=$addr" "$@"
