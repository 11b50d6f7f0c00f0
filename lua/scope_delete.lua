-- scope_delete.lua: delete a scope (its config stays stored as history). The config HASH
-- is marked deleted at the version given, so no script hands out a pod, a slot or a
-- deploy of the scope any more (scope_config answers NO_SCOPE) and a late publish of
-- that version or an older one is refused. Every pod is retired (podver RETIRED): it
-- is never handed out again, even when a later version makes the scope live again.
-- Deploys in flight lose their leases (their register is FENCED, so their pods are
-- deleted by their leaders) and their followers get a note; the waiters are dropped and
-- woken, to learn that the scope is gone. Sessions and holds on the pods go on until
-- they end; the sweeper deletes each pod once it is idle (the scope is due at once).
-- KEYS: epoch config pods podver deploying followers claims claimpod waiters queue wake
--       dstats due free freeprev warm warmprev busy surplus podclaims rooms open
-- uses: config deploy due
-- ARGV[1] version deleted (the latest stored)  ARGV[2] note deadline (ms)
-- ARGV[3] publish command  ARGV[4] broadcast wake-up message
-- Returns {"deleted", pods} (how many pods the scope had) | {"unknown"} (never
-- published, or deleted already) | {"newer"} (a newer version is published: it stays)
-- | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
if redis.call('EXISTS', k.epoch) == 0 then
  return {'EPOCH_LOST'}
end
local cfg = redis.call('HMGET', k.config, 'config', 'version', 'deleted')
if not cfg[1] or cfg[3] then
  return {'unknown'}
end
local version = tonumber(ARGV[1])
if tonumber(cfg[2]) > version then
  return {'newer'}
end
redis.call('HSET', k.config, 'deleted', version, 'version', version)
local pods = redis.call('ZRANGE', k.pods, 0, -1)
for _, pod in ipairs(pods) do
  redis.call('HSET', k.podver, pod, RETIRED)
end
-- no pod is of a version the pod indexes follow
redis.call('DEL', k.free, k.freeprev, k.warm, k.warmprev, k.busy, k.surplus)
for _, d in ipairs(redis.call('ZRANGE', k.deploying, 0, -1)) do
  redis.call('ZREM', k.deploying, d)
  redis.call('HDEL', k.dstats, 'start:' .. d)
  fail_followers(k, d, 'the scope was deleted', ARGV[2])
end
if redis.call('ZCARD', k.waiters) > 0 then
  redis.call('DEL', k.waiters, k.queue)
  redis.call(ARGV[3], k.wake, ARGV[4])
end
note_due(0)
return {'deleted', tostring(#pods)}
