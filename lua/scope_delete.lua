-- scope_delete.lua: delete a scope (its config stays stored as history). The config HASH
-- is marked deleted at the version given, so no script hands out a pod, a slot or a
-- deploy of the scope any more (scope_config answers NO_SCOPE) and a late publish of
-- that version or an older one is refused. Every pod is retired (podver RETIRED): it
-- is never handed out again, even when a later version makes the scope live again.
-- Deploys in flight lose their leases (their register is FENCED, so their pods are
-- deleted by their leaders) and their followers get a note; the waiters are dropped and
-- woken, to learn that the scope is gone. Sessions and holds on the pods go on until
-- they end; the sweeper deletes each pod once it is idle (the scope is due at once).
-- KEYS[1]  {s}:epoch      STRING scope epoch
-- KEYS[2]  {s}:config     HASH   published scope config
-- KEYS[3]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[5]  {s}:deploying  ZSET   deploy member -> lease deadline (ms)
-- KEYS[6]  {s}:followers  ZSET   "<deploy>|<claim>" -> deadline (ms)
-- KEYS[7]  {s}:claims     ZSET   claim id -> deadline (ms)
-- KEYS[8]  {s}:claimpod   HASH   claim id -> pod id | "!reason"
-- KEYS[9]  {s}:waiters    ZSET   waiter id -> deadline (ms)
-- KEYS[10] {s}:queue      ZSET   waiter id -> arrival number
-- KEYS[11] {s}:wake       the scope's wake-up channel
-- KEYS[12] {s}:dstats     HASH   deploy time estimate and start times of deploys in flight
-- ARGV[1] version deleted (the latest stored)  ARGV[2] note deadline (ms)
-- ARGV[3] publish command  ARGV[4] broadcast wake-up message
-- Returns {"deleted", pods} (how many pods the scope had) | {"unknown"} (never
-- published, or deleted already) | {"newer"} (a newer version is published: it stays)
-- | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'EPOCH_LOST'}
end
local cfg = redis.call('HMGET', KEYS[2], 'config', 'version', 'deleted')
if not cfg[1] or cfg[3] then
  return {'unknown'}
end
local version = tonumber(ARGV[1])
if tonumber(cfg[2]) > version then
  return {'newer'}
end
redis.call('HSET', KEYS[2], 'deleted', version, 'version', version)
local pods = redis.call('ZRANGE', KEYS[3], 0, -1)
for _, pod in ipairs(pods) do
  redis.call('HSET', KEYS[4], pod, RETIRED)
end
for _, d in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  redis.call('ZREM', KEYS[5], d)
  redis.call('HDEL', KEYS[12], 'start:' .. d)
  fail_followers(KEYS[6], KEYS[7], KEYS[8], d, 'the scope was deleted', ARGV[2])
end
if redis.call('ZCARD', KEYS[9]) > 0 then
  redis.call('DEL', KEYS[9], KEYS[10])
  redis.call(ARGV[3], KEYS[11], ARGV[4])
end
note_due(0)
return {'deleted', tostring(#pods)}
