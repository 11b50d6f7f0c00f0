#!/usr/bin/env bash
# with-postgres.sh CMD... — run CMD with WARMPOOL_TEST_POSTGRES set to the DSN of a fresh
# PostgreSQL server that is stopped (and its data removed) afterwards, whatever CMD does.
exec "$(dirname "$0")/with.sh" postgres WARMPOOL_TEST_POSTGRES "$@"
