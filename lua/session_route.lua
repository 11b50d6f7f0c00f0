-- session_route.lua: where does a session go. A bound, live session keeps its pod (TTL
-- refreshed); else, with a claim, the session binds to the claimed pod when it is of
-- the current deploy_ver; else first fit over the current version's pods with a free
-- slot. Gate and bind are one step, so a pod never exceeds pod_concurrency.
-- KEYS[1]  {s}:epoch     STRING scope epoch
-- KEYS[2]  {s}:config    HASH   published scope config
-- KEYS[3]  {s}:pods      ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:podver    HASH   pod id -> deploy_ver
-- KEYS[5]  {s}:podinfo   HASH   pod id -> pod JSON
-- KEYS[6]  {s}:slots     HASH   pod id -> sessions + claims
-- KEYS[7]  {s}:idle      ZSET   pod id -> idle since (ms)
-- KEYS[8]  {s}:sessions  HASH   session id -> pod id
-- KEYS[9]  {s}:sexp      ZSET   session id -> expiry (ms)
-- KEYS[10] {s}:claims    ZSET   claim id -> deadline (ms)
-- KEYS[11] {s}:claimpod  HASH   claim id -> pod id | "!reason"
-- KEYS[12] {s}:waiters   ZSET   waiter id -> deadline (ms)
-- KEYS[13] {s}:idem:route:<request id>  STRING cached answer (PX)
-- ARGV[1] now (ms)  ARGV[2] session id  ARGV[3] claim id ("" for none)
-- ARGV[4] "1" when KEYS[13] names a request id  ARGV[5] answer cache TTL (ms)
-- Returns {"bound"|"new"|"replay", new flag "1"/"0", pod id, pod JSON, session id}
-- (a replay answers for the session of the first call)
--       | {"none", waiters} | {"NO_SCOPE"} | {"EPOCH_LOST"}
local now = tonumber(ARGV[1])
local sid = ARGV[2]
local claim = ARGV[3]
local cfg, refused = scope_config(KEYS[1], KEYS[2], 'deploy_ver', 'pod_concurrency', 'session_ttl_ms')
if not cfg then
  return refused
end
local idem = ARGV[4] == '1'
if idem then
  local cached = redis.call('GET', KEYS[13])
  if cached then
    -- a replay binds nothing: a slot handed to this attempt goes back
    if claim ~= '' then
      release_claim(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], claim, now, true)
    end
    local flag, first, pod, info = string.match(cached, '^(%d)\n([^\n]*)\n([^\n]*)\n(.*)$')
    return {'replay', flag, pod, info, first}
  end
end
local ver, pc = cfg[1], tonumber(cfg[2])
local expiry = now + tonumber(cfg[3])
expire_claims(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], now)

local function answer(kind, flag, pod)
  local info = redis.call('HGET', KEYS[5], pod) or ''
  if idem then
    redis.call('SET', KEYS[13], flag .. '\n' .. sid .. '\n' .. pod .. '\n' .. info, 'PX', ARGV[5], 'NX')
  end
  return {kind, flag, pod, info, sid}
end

local function bind(pod)
  redis.call('HSET', KEYS[8], sid, pod)
  redis.call('ZADD', KEYS[9], expiry, sid)
  redis.call('ZREM', KEYS[7], pod)
  return answer('new', '1', pod)
end

local bound = redis.call('HGET', KEYS[8], sid)
if bound then
  local e = redis.call('ZSCORE', KEYS[9], sid)
  if e and tonumber(e) > now then
    redis.call('ZADD', KEYS[9], expiry, sid)
    if claim ~= '' then
      release_claim(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], claim, now, true)
    end
    return answer('bound', '0', bound)
  end
  evict_session(KEYS[8], KEYS[9], KEYS[3], KEYS[6], KEYS[7], sid, now)
end

if claim ~= '' then
  local pod = redis.call('HGET', KEYS[11], claim)
  if holds_pod(pod) and redis.call('HGET', KEYS[4], pod) == ver then
    -- the claimed slot becomes the session's: the slot count stays
    redis.call('ZREM', KEYS[10], claim)
    redis.call('HDEL', KEYS[11], claim)
    return bind(pod)
  end
  release_claim(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], claim, now, true)
end

for _, pod in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  if redis.call('HGET', KEYS[4], pod) == ver and tonumber(redis.call('HGET', KEYS[6], pod) or '0') < pc then
    redis.call('HINCRBY', KEYS[6], pod, 1)
    return bind(pod)
  end
end
return {'none', tostring(redis.call('ZCARD', KEYS[12]))}
