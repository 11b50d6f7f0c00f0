-- session_route.lua: where does a session go, fairly. A bound, live session keeps its
-- pod (TTL refreshed, unless its expiry is fixed). Else a claim binds the session to its pod when that is of the
-- current deploy_ver (or of the one a prewarm serves, or retired since the claim was
-- taken: it served its max_sessions_per_pod): RM's claim (ARGV[3]) or the slot the
-- queue handed to this waiter (the claim named after it). Else the free slots of the
-- current version's pods (and of the prewarm's) go to
-- the queue first, oldest waiter first (this caller when its turn comes), and only what
-- is left fits a caller that is not queued. A caller that gets nothing while others
-- wait, or that asks to (ARGV[7]), joins the queue behind them (bounded by queue_size).
-- Gate and bind are one step, so a pod never exceeds pod_concurrency (one over it
-- after a lowering takes none), and a pod beyond max_pods takes none either. A caller
-- that is served leaves the queue; a slot handed to it and not used goes on to the next
-- waiter. A session this call binds expires session_ttl_s from now, or, with a fixed
-- TTL (ARGV[8], E2B's sandbox timeout), that TTL from now, and that expiry is fixed:
-- routes, touches and reports do not move it (session_deadline.lua does).
-- KEYS: epoch config pods podver podinfo slots idle claims claimpod sessions sexp waiters
--       queue qseq wake due served demand fixed sconf free freeprev warm warmprev busy
--       surplus podsess podclaims | extra: route_answer idem_mark
-- uses: claimpod config demand due handoff idem index quota served slots surplus
-- ARGV[1] now (ms)  ARGV[2] session id  ARGV[3] claim id ("" for none)
-- ARGV[4] the request's fingerprint ("" without a request id)  ARGV[5] answer cache TTL (ms)
-- ARGV[6] waiter id of the caller ("": it does not queue)
-- ARGV[7] "1": join the queue when nothing fits, even if nobody waits
-- ARGV[8] fixed TTL (ms; "" for none)  ARGV[9] grant deadline (ms)  ARGV[10] publish command
-- ARGV[11] the session's sealed session_config ("" for none): kept in sconf when this
-- call binds the session, ignored when it is bound already
-- Returns {"bound"|"new"|"replay", new flag "1"/"0", pod id, pod JSON, session id}
--       | {"mismatch"} (the request id names another request: a route of another
--         session, or an acquire; nothing is bound)
--       | {"none"} (nothing fits and the caller is not queued: nobody waits, or ARGV[6]
--         is "") | {"queued", rank (0 = first in line), deadline (ms)}
--       | {"full", queue_size} | {"no_wait"} (queue_size or wait_timeout_s is 0)
--       | {"quota", "sessions", held, allowance, tenant, cpu_m, memory_b} (a new session
--         beyond the scope's allowance of its tenant's quotas, lib/quota.lua; RM's
--         claim is kept for the call again, and the caller leaves the queue)
--       | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local sid, claim, waiter = ARGV[2], ARGV[3], ARGV[6]
local cfg, refused = scope_config(k, 'deploy_ver', 'session_ttl_ms', 'queue_size', 'wait_ms', 'q_sess')
if not cfg then
  return refused
end
local ver = cfg[1]
local q = handoff(k, now, ARGV[9], ARGV[10])
local prev = q.prev

-- leave takes the caller out of the queue; a slot handed to it other than used goes on.
local function leave(used)
  if waiter == '' then
    return
  end
  redis.call('ZREM', k.waiters, waiter)
  redis.call('ZREM', k.queue, waiter)
  if used ~= waiter and redis.call('HEXISTS', k.claimpod, waiter) == 1 then
    release_claim(k, waiter, now, true, q)
  end
end

local fp = ARGV[4]
local idem = fp ~= ''
if idem then
  local cached = redis.call('GET', k.route_answer)
  local other = idem_other(k.route_answer, fp) or idem_other(k.idem_mark, fp)
  if cached or other then
    -- a replay or a refusal binds nothing: a slot handed to this attempt goes back
    if claim ~= '' then
      release_claim(k, claim, now, true, q)
    end
    leave(nil)
    if other then
      return {'mismatch'}
    end
    local flag, pod, info = string.match(cached, '^[^\n]*\n(%d)\n([^\n]*)\n(.*)$')
    return {'replay', flag, pod, info, sid}
  end
end
local refreshed = now + tonumber(cfg[2])
local fixed = ARGV[8] ~= ''
local expiry = fixed and now + tonumber(ARGV[8]) or refreshed
expire_claims(k, now, q)

local function answer(kind, flag, pod)
  local info = redis.call('HGET', k.podinfo, pod) or ''
  if idem then
    redis.call('SET', k.route_answer, fp .. '\n' .. flag .. '\n' .. pod .. '\n' .. info, 'PX', ARGV[5], 'NX')
  end
  return {kind, flag, pod, info, sid}
end

local function bind(pod, used)
  leave(used)
  session_bind(k, sid, pod)
  redis.call('ZADD', k.sexp, expiry, sid)
  redis.call(fixed and 'SADD' or 'SREM', k.fixed, sid)
  if ARGV[11] ~= '' then
    redis.call('HSET', k.sconf, sid, ARGV[11])
  else
    redis.call('HDEL', k.sconf, sid)
  end
  note_due(expiry)
  if redis.call('ZREM', k.idle, pod) == 1 then
    note_fill()
    pod_index(k, pod)
  end
  return answer('new', '1', pod)
end

local bound = redis.call('HGET', k.sessions, sid)
if bound then
  local e = redis.call('ZSCORE', k.sexp, sid)
  if e and tonumber(e) > now then
    if redis.call('SISMEMBER', k.fixed, sid) == 0 then
      redis.call('ZADD', k.sexp, refreshed, sid)
    end
    if claim ~= '' then
      release_claim(k, claim, now, true, q)
    end
    leave(nil)
    return answer('bound', '0', bound)
  end
  evict_session(k, sid, now, q)
end

-- A new session: within the scope's allowance of its tenant's sessions, if governed.
-- RM's claim stays: the caller runs the route again with it once the escrow granted
-- more, and gives it back when it stops (a freed last slot of a recycle "delete" pod
-- would retire the pod under the route that deployed it).
local refused = quota_refusal(k, 'sessions', redis.call('HLEN', k.sessions), cfg[5])
if refused then
  leave(nil)
  return refused
end

-- RM's claim first, then the slot the queue handed to this waiter: the claimed slot
-- becomes the session's, so the slot count stays.
for _, c in ipairs({claim, waiter}) do
  if c ~= '' then
    local pod = redis.call('HGET', k.claimpod, c)
    local v = holds_pod(pod) and redis.call('HGET', k.podver, pod)
    if v and (serves(v, ver, prev) or v == RETIRED) then
      drop_claim(k, c)
      return bind(pod, c)
    end
    if pod then
      release_claim(k, c, now, true, q)
    end
  end
end

-- Free slots go to the waiters in order of arrival; the caller takes one when its turn
-- comes or when nobody (else) waits: first fit, the pods in the order they registered
-- (free and freeprev, lib/index.lua). A pod beyond max_pods takes none, and one that
-- has served max_sessions_per_pod takes no more (serve retires it).
local pod = first_free(k, prev)
while pod do
  local w = next_waiter(q)
  redis.call('HINCRBY', k.slots, pod, 1)
  demand_note(k, now, 'in', q.demand)
  -- a pod with a slot taken is not idle, whoever takes it (adopted and rolled-back
  -- pods can be idle while waiters queue)
  if redis.call('ZREM', k.idle, pod) == 1 then
    note_fill()
  end
  pod_index(k, pod)
  if not w or w == waiter then
    serve(k, pod, 1)
    return bind(pod, nil)
  end
  grant(q, w, pod)
  pod = first_free(k, prev)
end

if waiter == '' then
  return {'none'}
end
if not redis.call('ZSCORE', k.queue, waiter) then
  if redis.call('ZCARD', k.queue) == 0 and ARGV[7] ~= '1' then
    return {'none'}
  end
  local size, wait = tonumber(cfg[3]), tonumber(cfg[4])
  if size == 0 or wait == 0 then
    return {'no_wait'}
  end
  if not redis.call('ZSCORE', k.waiters, waiter) then
    drop_waiters(q)
    if redis.call('ZCARD', k.waiters) >= size then
      return {'full', tostring(size)}
    end
    redis.call('ZADD', k.waiters, now + wait, waiter)
    note_due(now + wait)
  end
  redis.call('ZADD', k.queue, redis.call('INCR', k.qseq), waiter)
end
return {'queued', tostring(redis.call('ZRANK', k.queue, waiter)), redis.call('ZSCORE', k.waiters, waiter)}
