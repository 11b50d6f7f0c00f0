-- session_end.lua: end a session: its slot is freed and, when it was the pod's last,
-- the pod goes idle (idle_consider in the same step).
-- KEYS[1] {s}:epoch     STRING scope epoch
-- KEYS[2] {s}:config    HASH   published scope config
-- KEYS[3] {s}:pods      ZSET   pod id -> registered at (ms)
-- KEYS[4] {s}:slots     HASH   pod id -> sessions + claims
-- KEYS[5] {s}:idle      ZSET   pod id -> idle since (ms)
-- KEYS[6] {s}:sessions  HASH   session id -> pod id
-- KEYS[7] {s}:sexp      ZSET   session id -> expiry (ms)
-- KEYS[8] {s}:waiters   ZSET   waiter id -> deadline (ms)
-- ARGV[1] now (ms)  ARGV[2] session id
-- Returns {"released", pod, waiters} | {"unknown"} | {"NO_SCOPE"} | {"EPOCH_LOST"}
local _, refused = scope_config(KEYS[1], KEYS[2], 'version')
if refused then
  return refused
end
if not redis.call('HGET', KEYS[6], ARGV[2]) then
  return {'unknown'}
end
local pod = evict_session(KEYS[6], KEYS[7], KEYS[3], KEYS[4], KEYS[5], ARGV[2], tonumber(ARGV[1]))
return {'released', pod, tostring(redis.call('ZCARD', KEYS[8]))}
