#!/usr/bin/env bash
# with-redis.sh CMD... — run CMD with REDIS_ADDR pointing at a fresh redis-server that
# is stopped afterwards, whatever CMD does.
exec "$(dirname "$0")/with.sh" redis REDIS_ADDR "$@"
