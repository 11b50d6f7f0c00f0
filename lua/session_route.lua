-- session_route.lua: where does a session go, fairly. A bound, live session keeps its
-- pod (TTL refreshed). Else a claim binds the session to its pod when that is of the
-- current deploy_ver: RM's claim (ARGV[3]) or the slot the queue handed to this waiter
-- (the claim named after it). Else the free slots of the current version's pods go to
-- the queue first, oldest waiter first (this caller when its turn comes), and only what
-- is left fits a caller that is not queued. A caller that gets nothing while others
-- wait, or that asks to (ARGV[7]), joins the queue behind them (bounded by queue_size).
-- Gate and bind are one step, so a pod never exceeds pod_concurrency (one over it
-- after a lowering takes none), and a pod beyond max_pods takes none either. A caller
-- that is served leaves the queue; a slot handed to it and not used goes on to the next
-- waiter.
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
-- KEYS[13] {s}:idem:route:<request id>  STRING cached answer (PX), "<fingerprint>\n<new
--          flag>\n<pod id>\n<pod JSON>"
-- KEYS[14] {s}:queue     ZSET   waiter id -> arrival number
-- KEYS[15] {s}:qseq      STRING arrival counter
-- KEYS[16] {s}:wake      the scope's wake-up channel
-- KEYS[17] {s}:idem:run:<request id>  STRING the request id's mark (idem_claim.lua)
-- ARGV[1] now (ms)  ARGV[2] session id  ARGV[3] claim id ("" for none)
-- ARGV[4] the request's fingerprint ("" without a request id)  ARGV[5] answer cache TTL (ms)
-- ARGV[6] waiter id of the caller ("": it does not queue)
-- ARGV[7] "1": join the queue when nothing fits, even if nobody waits
-- ARGV[8] grant deadline (ms)  ARGV[9] publish command
-- Returns {"bound"|"new"|"replay", new flag "1"/"0", pod id, pod JSON, session id}
--       | {"mismatch"} (the request id names another request: a route of another
--         session, or an acquire; nothing is bound)
--       | {"none"} (nothing fits and the caller is not queued: nobody waits, or ARGV[6]
--         is "") | {"queued", rank (0 = first in line), deadline (ms)}
--       | {"full", queue_size} | {"no_wait"} (queue_size or wait_timeout_s is 0)
--       | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
local now = tonumber(ARGV[1])
local sid, claim, waiter = ARGV[2], ARGV[3], ARGV[6]
local cfg, refused = scope_config(KEYS[1], KEYS[2], 'deploy_ver', 'pod_concurrency', 'session_ttl_ms', 'queue_size', 'wait_ms', 'max_pods')
if not cfg then
  return refused
end
local ver, pc = cfg[1], tonumber(cfg[2])
local q = handoff(KEYS[2], KEYS[4], KEYS[10], KEYS[11], KEYS[12], KEYS[14], KEYS[16], now, ARGV[8], ARGV[9])

-- leave takes the caller out of the queue; a slot handed to it other than used goes on.
local function leave(used)
  if waiter == '' then
    return
  end
  redis.call('ZREM', KEYS[12], waiter)
  redis.call('ZREM', KEYS[14], waiter)
  if used ~= waiter and redis.call('HEXISTS', KEYS[11], waiter) == 1 then
    release_claim(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], waiter, now, true, q)
  end
end

local fp = ARGV[4]
local idem = fp ~= ''
if idem then
  local cached = redis.call('GET', KEYS[13])
  local other = idem_other(KEYS[13], fp) or idem_other(KEYS[17], fp)
  if cached or other then
    -- a replay or a refusal binds nothing: a slot handed to this attempt goes back
    if claim ~= '' then
      release_claim(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], claim, now, true, q)
    end
    leave(nil)
    if other then
      return {'mismatch'}
    end
    local flag, pod, info = string.match(cached, '^[^\n]*\n(%d)\n([^\n]*)\n(.*)$')
    return {'replay', flag, pod, info, sid}
  end
end
local expiry = now + tonumber(cfg[3])
expire_claims(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], now, q)

local function answer(kind, flag, pod)
  local info = redis.call('HGET', KEYS[5], pod) or ''
  if idem then
    redis.call('SET', KEYS[13], fp .. '\n' .. flag .. '\n' .. pod .. '\n' .. info, 'PX', ARGV[5], 'NX')
  end
  return {kind, flag, pod, info, sid}
end

local function bind(pod, used)
  leave(used)
  redis.call('HSET', KEYS[8], sid, pod)
  redis.call('ZADD', KEYS[9], expiry, sid)
  note_due(expiry)
  if redis.call('ZREM', KEYS[7], pod) == 1 then
    note_fill()
  end
  return answer('new', '1', pod)
end

local bound = redis.call('HGET', KEYS[8], sid)
if bound then
  local e = redis.call('ZSCORE', KEYS[9], sid)
  if e and tonumber(e) > now then
    redis.call('ZADD', KEYS[9], expiry, sid)
    if claim ~= '' then
      release_claim(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], claim, now, true, q)
    end
    leave(nil)
    return answer('bound', '0', bound)
  end
  evict_session(KEYS[8], KEYS[9], KEYS[3], KEYS[6], KEYS[7], sid, now, q)
end

-- RM's claim first, then the slot the queue handed to this waiter: the claimed slot
-- becomes the session's, so the slot count stays.
for _, c in ipairs({claim, waiter}) do
  if c ~= '' then
    local pod = redis.call('HGET', KEYS[11], c)
    if holds_pod(pod) and redis.call('HGET', KEYS[4], pod) == ver then
      redis.call('ZREM', KEYS[10], c)
      redis.call('HDEL', KEYS[11], c)
      return bind(pod, c)
    end
    if pod then
      release_claim(KEYS[10], KEYS[11], KEYS[3], KEYS[6], KEYS[7], c, now, true, q)
    end
  end
end

-- Free slots go to the waiters in order of arrival; the caller takes one when its turn
-- comes or when nobody (else) waits. A pod beyond max_pods takes none.
local surplus = surplus_pods(ver, tonumber(cfg[6]), KEYS[3], KEYS[4], KEYS[7])
for _, pod in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  if redis.call('HGET', KEYS[4], pod) == ver and not surplus[pod] then
    local n = tonumber(redis.call('HGET', KEYS[6], pod) or '0')
    while n < pc do
      local w = next_waiter(q)
      redis.call('HINCRBY', KEYS[6], pod, 1)
      -- a pod with a slot taken is not idle, whoever takes it (adopted and rolled-back
      -- pods can be idle while waiters queue)
      if redis.call('ZREM', KEYS[7], pod) == 1 then
        note_fill()
      end
      n = n + 1
      if not w or w == waiter then
        return bind(pod, nil)
      end
      grant(q, w, pod)
    end
  end
end

if waiter == '' then
  return {'none'}
end
if not redis.call('ZSCORE', KEYS[14], waiter) then
  if redis.call('ZCARD', KEYS[14]) == 0 and ARGV[7] ~= '1' then
    return {'none'}
  end
  local size, wait = tonumber(cfg[4]), tonumber(cfg[5])
  if size == 0 or wait == 0 then
    return {'no_wait'}
  end
  if not redis.call('ZSCORE', KEYS[12], waiter) then
    drop_waiters(q)
    if redis.call('ZCARD', KEYS[12]) >= size then
      return {'full', tostring(size)}
    end
    redis.call('ZADD', KEYS[12], now + wait, waiter)
    note_due(now + wait)
  end
  redis.call('ZADD', KEYS[14], redis.call('INCR', KEYS[15]), waiter)
end
return {'queued', tostring(redis.call('ZRANK', KEYS[14], waiter)), redis.call('ZSCORE', KEYS[12], waiter)}
