-- session_get.lua: read a session's binding (read-only: an expired one reads as gone
-- and is left to touch or the expiry sweep).
-- KEYS: config podinfo sessions sexp
-- ARGV[1] now (ms)  ARGV[2] session id
-- Returns {"found", pod, pod JSON, expiry} | {"unknown"} | {"NO_SCOPE"}
local k = scope_keys(KEYS)
if redis.call('EXISTS', k.config) == 0 then
  return {'NO_SCOPE'}
end
local pod = redis.call('HGET', k.sessions, ARGV[2])
local e = redis.call('ZSCORE', k.sexp, ARGV[2])
if not pod or not e or tonumber(e) <= tonumber(ARGV[1]) then
  return {'unknown'}
end
return {'found', pod, redis.call('HGET', k.podinfo, pod) or '', e}
