-- session_get.lua: read a session's binding (read-only: an expired one reads as gone
-- and is left to touch or the expiry sweep).
-- KEYS[1] {s}:config    HASH published scope config
-- KEYS[2] {s}:sessions  HASH session id -> pod id
-- KEYS[3] {s}:sexp      ZSET session id -> expiry (ms)
-- KEYS[4] {s}:podinfo   HASH pod id -> pod JSON
-- ARGV[1] now (ms)  ARGV[2] session id
-- Returns {"found", pod, pod JSON, expiry} | {"unknown"} | {"NO_SCOPE"}
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'NO_SCOPE'}
end
local pod = redis.call('HGET', KEYS[2], ARGV[2])
local e = redis.call('ZSCORE', KEYS[3], ARGV[2])
if not pod or not e or tonumber(e) <= tonumber(ARGV[1]) then
  return {'unknown'}
end
return {'found', pod, redis.call('HGET', KEYS[4], pod) or '', e}
