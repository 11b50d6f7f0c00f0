-- pod_release.lua: idle_consider. A registered pod with no session and no claim joins
-- the idle set and its pod_ttl clock starts (an already idle pod keeps its clock).
-- KEYS[1] {s}:epoch   STRING scope epoch
-- KEYS[2] {s}:pods    ZSET   pod id -> registered at (ms)
-- KEYS[3] {s}:slots   HASH   pod id -> sessions + claims
-- KEYS[4] {s}:idle    ZSET   pod id -> idle since (ms)
-- KEYS[5] {s}:config  HASH   published scope config
-- ARGV[1] now (ms)  ARGV[2] pod id
-- Returns {"idle"} | {"busy", slots} | {"unknown"} | {"NO_SCOPE"} | {"EPOCH_LOST"}
local _, refused = scope_config(KEYS[1], KEYS[5], 'version')
if refused then
  return refused
end
local pod = ARGV[2]
if not redis.call('ZSCORE', KEYS[2], pod) then
  return {'unknown'}
end
local n = tonumber(redis.call('HGET', KEYS[3], pod) or '0')
if n > 0 then
  return {'busy', tostring(n)}
end
redis.call('ZADD', KEYS[4], 'NX', ARGV[1], pod)
return {'idle'}
