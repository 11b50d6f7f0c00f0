#!/usr/bin/env bash
# with-redis.sh CMD... — run CMD with REDIS_ADDR pointing at a fresh redis-server that
# is stopped afterwards, whatever CMD does. The tests (internal/testing/testredis) create the
# README's ACL user in it and run warmpool's code as that user.
exec "$(dirname "$0")/with.sh" redis REDIS_ADDR "$@"
