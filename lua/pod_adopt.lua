-- pod_adopt.lua: take a pod the driver has but Redis does not know into the idle pool
-- (reconcile, and the rebuild after Redis lost its data: it runs before the epoch is
-- written, so it does not check it). Within max_pods only.
-- KEYS[1] {s}:config     HASH   published scope config
-- KEYS[2] {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[3] {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[4] {s}:podinfo    HASH   pod id -> pod JSON
-- KEYS[5] {s}:slots      HASH   pod id -> sessions + claims
-- KEYS[6] {s}:idle       ZSET   pod id -> idle since (ms)
-- KEYS[7] {s}:deploying  ZSET   deploy member -> lease deadline (ms)
-- KEYS[8] {s}:gone:<pod> STRING the pod's tombstone, set when it was purged
-- ARGV[1] now (ms)  ARGV[2] pod id  ARGV[3] deploy_ver  ARGV[4] pod JSON
-- Returns {"adopted"} | {"known"} | {"full"} (no room under max_pods)
--       | {"gone"} (purged lately: it is being deleted, not adopted) | {"NO_SCOPE"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local max_pods = redis.call('HGET', KEYS[1], 'max_pods')
if not max_pods then
  return {'NO_SCOPE'}
end
local pod = ARGV[2]
if redis.call('ZSCORE', KEYS[2], pod) then
  return {'known'}
end
if redis.call('EXISTS', KEYS[8]) == 1 then
  return {'gone'}
end
if redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[7]) >= tonumber(max_pods) then
  return {'full'}
end
redis.call('ZADD', KEYS[2], ARGV[1], pod)
redis.call('HSET', KEYS[3], pod, ARGV[3])
redis.call('HSET', KEYS[4], pod, ARGV[4])
redis.call('HSET', KEYS[5], pod, 0)
redis.call('ZADD', KEYS[6], ARGV[1], pod)
return {'adopted'}
