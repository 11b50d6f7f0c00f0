#!/usr/bin/env bash
# with-postgres.sh CMD... — run CMD with WARMPOOL_TEST_POSTGRES set to the DSN of a fresh
# PostgreSQL server that is stopped (and its data removed) afterwards, whatever CMD does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/warmpool-postgres.XXXXXX")
trap '"$here/postgres.sh" stop "$dir"; rm -rf "$dir"' EXIT
dsn=$("$here/postgres.sh" start "$dir")
echo "with-postgres: PostgreSQL at $dsn" >&2
WARMPOOL_TEST_POSTGRES=$dsn "$@"
