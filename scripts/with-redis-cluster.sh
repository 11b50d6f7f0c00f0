#!/usr/bin/env bash
# with-redis-cluster.sh CMD... — run CMD with REDIS_CLUSTER_ADDRS naming a fresh
# 3-master Redis Cluster that is stopped afterwards, whatever CMD does. The tests
# (internal/testing/testredis) create the README's ACL user on every master and run warmpool's
# code as that user.
exec "$(dirname "$0")/with.sh" redis-cluster REDIS_CLUSTER_ADDRS "$@"
