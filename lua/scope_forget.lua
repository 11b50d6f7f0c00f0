-- scope_forget.lua: forget a deleted scope once nothing of it is left: no pod, no
-- deploy in flight. Every key below goes, the deploy estimate and the deploy log
-- included, but for a tombstone: the config HASH keeps only its version and the
-- deleted mark (a late publish of that version stays refused, and the next one makes
-- the scope live again), and the fencing counter, not among them, stays (pods of a
-- later life never reuse a name of this one). The caller then takes the scope out of
-- the global index.
-- KEYS: epoch config pods podver podinfo slots idle deploying followers claims claimpod
--       sessions sexp waiters queue qseq health dstats due deploylog agents backoff
--       served demand fixed sconf free freeprev warm warmprev busy surplus podsess
--       podclaims rooms open
-- ARGV none
-- Returns {"forgotten"} | {"live"} (not deleted, or live again) | {"busy"} (pods
-- or deploys left)
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local k = scope_keys(KEYS)
local cfg = redis.call('HMGET', k.config, 'version', 'deleted')
if not cfg[2] then
  return {'live'}
end
if redis.call('ZCARD', k.pods) + redis.call('ZCARD', k.deploying) > 0 then
  return {'busy'}
end
for _, key in pairs(k) do
  redis.call('DEL', key)
end
redis.call('HSET', k.config, 'version', cfg[1], 'deleted', cfg[2])
return {'forgotten'}
