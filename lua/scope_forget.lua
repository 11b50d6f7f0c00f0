-- scope_forget.lua: forget a deleted scope once nothing of it is left: no pod, no
-- deploy in flight. Every key of the scope goes, the deploy estimate and the deploy
-- log included, but for a tombstone: the config HASH keeps only its version and the
-- deleted mark (a late publish of that version stays refused, and the next one makes
-- the scope live again) and the fencing counter stays (pods of a later life never
-- reuse a name of this one). The caller then takes the scope out of the global index.
-- KEYS[1]  {s}:config     HASH   published scope config
-- KEYS[2]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[3]  {s}:deploying  ZSET   deploy member -> lease deadline (ms)
-- KEYS[4..] every other key of the scope, deleted (see Store.ScopeForget)
-- ARGV none
-- Returns {"forgotten"} | {"live"} (not deleted, or live again) | {"busy"} (pods
-- or deploys left)
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local cfg = redis.call('HMGET', KEYS[1], 'version', 'deleted')
if not cfg[2] then
  return {'live'}
end
if redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]) > 0 then
  return {'busy'}
end
for i = 2, #KEYS do
  redis.call('DEL', KEYS[i])
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'version', cfg[1], 'deleted', cfg[2])
return {'forgotten'}
