-- session_evict.lua: evict up to ARGV[2] sessions whose TTL has passed (the session
-- expiry sweep), freeing their slots.
-- KEYS[1] {s}:epoch     STRING scope epoch
-- KEYS[2] {s}:pods      ZSET   pod id -> registered at (ms)
-- KEYS[3] {s}:slots     HASH   pod id -> sessions + claims
-- KEYS[4] {s}:idle      ZSET   pod id -> idle since (ms)
-- KEYS[5] {s}:sessions  HASH   session id -> pod id
-- KEYS[6] {s}:sexp      ZSET   session id -> expiry (ms)
-- KEYS[7] {s}:waiters   ZSET   waiter id -> deadline (ms)
-- ARGV[1] now (ms)  ARGV[2] most sessions to evict
-- Returns {evicted, waiters} | {"EPOCH_LOST"}
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'EPOCH_LOST'}
end
local now = tonumber(ARGV[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, sid in ipairs(gone) do
  evict_session(KEYS[5], KEYS[6], KEYS[2], KEYS[3], KEYS[4], sid, now)
end
return {tostring(#gone), tostring(redis.call('ZCARD', KEYS[7]))}
