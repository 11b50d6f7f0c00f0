-- session_config.lua: read the session_config of a session or hold live on a pod, for
-- the pod's agent (read-only). A session bound to the pod and not expired, else a hold
-- of that id on the pod and not expired, is found; anything else (another pod's, an
-- ended or expired one, an unknown id) is unknown.
-- KEYS: podinfo claims claimpod sessions sexp sconf
-- ARGV[1] now (ms)  ARGV[2] session or hold id  ARGV[3] pod id
-- Returns {"found", sealed session_config ("" for none), pod id, pod JSON} | {"unknown"}
local k = scope_keys(KEYS)
local now, id, pod = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local function live(zset)
  local e = redis.call('ZSCORE', zset, id)
  return e and tonumber(e) > now
end
local field
if redis.call('HGET', k.sessions, id) == pod and live(k.sexp) then
  field = id
elseif redis.call('HGET', k.claimpod, id) == pod and live(k.claims) then
  field = 'hold|' .. id
else
  return {'unknown'}
end
return {'found', redis.call('HGET', k.sconf, field) or '', pod, redis.call('HGET', k.podinfo, pod) or ''}
