-- session_touch.lua: refresh a live session's TTL; an expired one is evicted here
-- (its slot freed, the pod idle if it was the last).
-- KEYS[1] {s}:epoch     STRING scope epoch
-- KEYS[2] {s}:config    HASH   published scope config
-- KEYS[3] {s}:pods      ZSET   pod id -> registered at (ms)
-- KEYS[4] {s}:slots     HASH   pod id -> sessions + claims
-- KEYS[5] {s}:idle      ZSET   pod id -> idle since (ms)
-- KEYS[6] {s}:sessions  HASH   session id -> pod id
-- KEYS[7] {s}:sexp      ZSET   session id -> expiry (ms)
-- KEYS[8] {s}:waiters   ZSET   waiter id -> deadline (ms)
-- ARGV[1] now (ms)  ARGV[2] session id
-- Returns {"touched"} | {"expired", waiters} | {"unknown"} | {"NO_SCOPE"} | {"EPOCH_LOST"}
local now = tonumber(ARGV[1])
local cfg, refused = scope_config(KEYS[1], KEYS[2], 'session_ttl_ms')
if not cfg then
  return refused
end
local ttl = cfg[1]
local e = redis.call('ZSCORE', KEYS[7], ARGV[2])
if not e then
  return {'unknown'}
end
if tonumber(e) > now then
  redis.call('ZADD', KEYS[7], now + tonumber(ttl), ARGV[2])
  return {'touched'}
end
evict_session(KEYS[6], KEYS[7], KEYS[3], KEYS[4], KEYS[5], ARGV[2], now)
return {'expired', tostring(redis.call('ZCARD', KEYS[8]))}
