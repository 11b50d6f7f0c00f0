-- hold_touch.lua: extend a live hold on its pod to now + hold_ttl_s; acquire uses it to
-- turn the claim it handed out into a hold.
-- A deleted scope's holds go on until they end, so this works on it too.
-- KEYS: epoch config claims claimpod sconf
-- uses: config
-- ARGV[1] now (ms)  ARGV[2] hold id  ARGV[3] pod id
-- ARGV[4] the hold's sealed session_config ("" for none: a touch keeps the one it has),
-- in sconf under "hold|<hold id>"
-- Returns {"held", hold until (ms)} | {"unknown"} (no such live hold on that pod)
--       | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes no due work: a hold extended moves its work later, and the sweep that finds
-- nothing at the old time computes the due time again.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local cfg, refused = published_config(k, 'hold_ttl_ms')
if not cfg then
  return refused
end
local deadline = redis.call('ZSCORE', k.claims, ARGV[2])
if redis.call('HGET', k.claimpod, ARGV[2]) ~= ARGV[3] or not deadline or tonumber(deadline) <= now then
  return {'unknown'}
end
local until_ms = now + tonumber(cfg[1])
redis.call('ZADD', k.claims, 'XX', until_ms, ARGV[2])
if ARGV[4] ~= '' then
  redis.call('HSET', k.sconf, 'hold|' .. ARGV[2], ARGV[4])
end
return {'held', tostring(until_ms)}
