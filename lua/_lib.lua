-- _lib.lua: helpers prepended to every script; not a script of its own.
--
-- Keys. A script takes a scope's keys in one fixed order (lua/keys.go), those it needs,
-- then the extra keys its wrapper gives (a request id's mark, a pod's tombstone, a
-- lock). lua.go prepends the names of a script's KEYS in that order as KEY_NAMES, and
-- scope_keys turns KEYS into a table by those names: the script and the helpers below
-- read k.pods and k.slots, never a position in KEYS. The scope's keys, by name:
--   epoch     STRING scope epoch (missing = Redis lost its data)
--   config    HASH  published scope config
--   pods      ZSET  pod id -> registered at (ms)
--   podver    HASH  pod id -> deploy_ver
--   podinfo   HASH  pod id -> pod JSON
--   slots     HASH  pod id -> sessions + live claims on the pod
--   idle      ZSET  pod id -> idle since (ms); a pod is idle only with 0 slots
--   deploying ZSET  deploy member ("<fence>" or "<fence>w") -> lease deadline (ms)
--   followers ZSET  "<deploy member>|<claim id>" -> deadline (ms)
--   claims    ZSET  claim id -> deadline (ms)
--   claimpod  HASH  claim id -> pod id, or a note for a follower whose deploy ended
--                   without a pod: "!reason" when it failed, "!lost:reason" when it was
--                   lost (see fail_followers)
--   fence     STRING fencing counter
--   sessions  HASH  session id -> pod id
--   sexp      ZSET  session id -> expiry (ms)
--   waiters   ZSET  waiter id -> deadline (ms): every live waiter, served a slot or not
--   queue     ZSET  waiter id -> arrival number: the waiters still without a slot
--   qseq      STRING arrival counter of the queue
--   wake      the scope's pub/sub channel (a channel, in KEYS for its cluster slot)
--   health    HASH  pod id -> consecutive failed probes
--   dstats    HASH  "est" -> rolling estimate of the scope's deploy time (ms);
--                   "start:<deploy member>" -> when that deploy in flight started (ms)
--   due       STRING when the scope's next sweep work falls due (ms)
--   deploylog LIST  the latest finished deploys, newest first
--   agents    HASH  "<pod>" -> until when the pod's reports spare it the probes (ms);
--                   "<pod>|miss" -> sessions bound to it that its last report left out
--   backoff   HASH  the refill backoff: failures, until (ms), error (see backoff_refusal)
--   served    HASH  pod id -> the slots handed out on the pod over its life (see serve)
--   demand    HASH  the slot takes and frees, decayed (see demand_note)
--   fixed     SET   sessions whose expiry is fixed: routes, touches and reports leave
--                   their sexp alone (E2B's sandbox timeout; see session_deadline.lua)

-- scope_keys is the table of a script's KEYS by name (KEY_NAMES): k.pods is the
-- scope's pods key, k.route_answer an extra key of session_route.lua.
local function scope_keys(keys)
  local k = {}
  for i, name in ipairs(KEY_NAMES) do
    k[name] = keys[i]
  end
  return k
end

-- The fair queue. A slot freed while waiters are queued is handed to the oldest live
-- one inside the script that frees it: the slot stays counted and becomes a claim named
-- after the waiter (a grant) with a short deadline, the waiter leaves the queue, and a
-- message naming it goes out on the scope's channel. A waiter that died never binds its
-- grant; the claim expires and its slot is handed on like any other.

-- Idempotency. The keys of a request id, its mark (idem_claim.lua) and a route's answer
-- (session_route.lua), each open with the fingerprint of the request the id names,
-- "<fingerprint>\n…", so a request with another fingerprint is refused whichever of them
-- it finds.

-- idem_mark reads the request id's mark at key: its fingerprint, owner token and answer
-- ("" while the first request runs); nothing when there is no mark.
local function idem_mark(key)
  local v = redis.call('GET', key)
  if v then
    return string.match(v, '^([^\n]*)\n([^\n]*)\n(.*)$')
  end
end

-- idem_other reports whether key, a mark or a route's answer, names a request of
-- another fingerprint than fp.
local function idem_other(key, fp)
  local v = redis.call('GET', key)
  return v ~= false and string.match(v, '^[^\n]*') ~= fp
end

-- Sweep due times. A script that leaves the sweeper work for later (a deadline in a
-- ZSET, an idle pod's pod_ttl_s, a pool to refill to min_idle_pods) notes when that work
-- falls due in the scope's due key (STRING, ms), which only ever moves earlier here; the
-- sweeper's scope_due.lua sets it to the scope's next due time after a visit. lua.go
-- marks the scripts that note (they take the config and due keys) and sets due.key and
-- due.config before such a script runs; when a note moved the due time, the caller
-- (Store.call) gets {"DUE", due, answer} back and moves the scope in its shard's due
-- index. In the other scripts the notes do nothing.
local due = {}

-- note_due notes work of the scope due at t (ms; 0 = at once).
local function note_due(t)
  if not due.key then
    return
  end
  t = tonumber(t)
  if due.cur == nil then
    due.cur = tonumber(redis.call('GET', due.key)) or false
  end
  if due.cur and due.cur <= t then
    return
  end
  redis.call('SET', due.key, t)
  due.cur, due.noted = t, t
end

-- note_idle notes a pod gone idle at now: reclaim looks at it when pod_ttl_s has passed,
-- or at once in a deleted scope, whose pods are deleted as they go idle, and in a scope
-- with more pods (k.pods) than max_pods, whose idle pods may be surplus.
local function note_idle(k, now)
  if not due.key then
    return
  end
  if redis.call('HEXISTS', due.config, 'deleted') == 1
    or redis.call('ZCARD', k.pods) > tonumber(redis.call('HGET', due.config, 'max_pods') or '0') then
    note_due(now)
  else
    note_due(now + tonumber(redis.call('HGET', due.config, 'pod_ttl_ms') or '0'))
  end
end

-- note_fill notes that the scope may have fewer idle pods than it keeps (one was
-- taken, purged, or a deploy failed): autoscale looks at it at once. A scope keeps
-- min_idle_pods, or under warm_policy "demand" a target that a take may raise.
local function note_fill()
  if not due.key then
    return
  end
  local cfg = redis.call('HMGET', due.config, 'min_idle', 'warm_policy')
  if tonumber(cfg[1] or '0') > 0 or cfg[2] == 'demand' then
    note_due(0)
  end
end

-- Demand (warm_policy "demand", SPEC §11.3). A scope under it counts, across
-- replicas, the slots its pods' callers take (a session bound to a free slot, a hold,
-- a place in a deploy's room, a deploy led for a caller, a slot granted to a waiter)
-- and the slots freed on pods of the current deploy_ver that stay in the pool (a
-- slot handed straight to a waiter is neither). Each count is kept twice, decayed
-- exponentially with a fast and a slow time constant: a count decayed with time
-- constant tau, divided by tau, is the rate of the last tau or so, and the two rates
-- together give the trend. idle_target turns them into the idle pods to keep
-- (docs/architecture.md, "Demand-driven warm pools").
local DEMAND_FAST, DEMAND_SLOW = 15000, 60000
-- DEMAND_HEADROOM is k in the burst headroom k * sqrt(slots taken over the lead time,
-- gross) (Poisson: k standard deviations of the takes; make pooltrace tuned it).
local DEMAND_HEADROOM = 0.5
-- DEMAND_DEPLOY is the deploy time assumed before the scope has a measured one (ms).
local DEMAND_DEPLOY = 10000

-- demand_counts reads the scope's counts decayed to now: takes and frees, each with
-- the fast and the slow time constant.
local function demand_counts(k, now)
  local d = redis.call('HMGET', k.demand, 't', 'in_fast', 'in_slow', 'out_fast', 'out_slow')
  local dt = math.max(0, now - (tonumber(d[1]) or now))
  local ff, fs = math.exp(-dt / DEMAND_FAST), math.exp(-dt / DEMAND_SLOW)
  return {in_fast = (tonumber(d[2]) or 0) * ff, in_slow = (tonumber(d[3]) or 0) * fs,
    out_fast = (tonumber(d[4]) or 0) * ff, out_slow = (tonumber(d[5]) or 0) * fs}
end

-- demand_note counts one slot taken (dir "in") or freed ("out") at now, when the
-- script takes the demand key and the scope's warm_policy is "demand" (demanding).
local function demand_note(k, now, dir, demanding)
  if not demanding or not k.demand then
    return
  end
  local c = demand_counts(k, now)
  c[dir .. '_fast'], c[dir .. '_slow'] = c[dir .. '_fast'] + 1, c[dir .. '_slow'] + 1
  redis.call('HSET', k.demand, 't', now, 'in_fast', c.in_fast, 'in_slow', c.in_slow,
    'out_fast', c.out_fast, 'out_slow', c.out_slow)
end

-- idle_target is how many idle pods of the current version the scope keeps at now:
-- min_idle_pods under warm_policy "static"; under "demand" the slots its callers are
-- expected to take, net of the slots expected back, over the lead time of a refill
-- (the measured deploy time, k.dstats "est", plus period ms, the sweep's tick), with
-- headroom for bursts, in pods, within min_idle_pods and max_idle_pods (0: max_pods).
-- Returns the target and the figures it came from (rates per ms), read only.
local function idle_target(k, now, period)
  local cfg = redis.call('HMGET', k.config, 'warm_policy', 'min_idle', 'max_idle', 'max_pods', 'pod_concurrency')
  local min_idle = tonumber(cfg[2] or '0')
  local f = {policy = cfg[1] or 'static', min_idle = min_idle, target = min_idle}
  if f.policy ~= 'demand' then
    return min_idle, f
  end
  local max_idle = tonumber(cfg[3] or '0')
  if max_idle == 0 then
    max_idle = tonumber(cfg[4] or '0')
  end
  f.max_idle = max_idle
  local c = demand_counts(k, now)
  f.deploy = tonumber(redis.call('HGET', k.dstats, 'est') or DEMAND_DEPLOY)
  f.lead = f.deploy + period
  f.takes, f.frees = c.in_fast / DEMAND_FAST, c.out_fast / DEMAND_FAST
  -- A count decayed with time constant tau follows a rate that grows linearly with a
  -- lag of tau: the fast and the slow net rate, tau apart, give the slope, which
  -- carries the fast rate to the middle of the lead time.
  local fast, slow = f.takes - f.frees, (c.in_slow - c.out_slow) / DEMAND_SLOW
  f.trend = (fast - slow) / (DEMAND_SLOW - DEMAND_FAST)
  f.need = math.max(0, (fast + f.trend * (DEMAND_FAST + f.lead / 2)) * f.lead)
  local pods = math.ceil((f.need + DEMAND_HEADROOM * math.sqrt(f.takes * f.lead)) / tonumber(cfg[5] or '1'))
  f.target = math.max(min_idle, math.min(max_idle, pods))
  return f.target, f
end

-- due_reply is the answer of a script that takes the due keys.
local function due_reply(r)
  if due.noted then
    return {'DUE', tostring(due.noted), r}
  end
  return r
end

-- Deleted scopes. Deleting a scope marks its config HASH with a "deleted" field (the
-- version deleted) and retires its pods: their podver entry becomes RETIRED, which is
-- never a scope's deploy_ver, so they are never handed out again, as pods of an old
-- deploy_ver. The sessions and holds already on them go on until they end.
local RETIRED = 'retired'

-- Draining pods. A pod whose agent reports "draining" (agent_report.lua) gets podver
-- DRAINING: like a retired pod it is never handed out again (no session, hold or
-- grant lands on it), its sessions go on, and it is deleted once it has none: going
-- idle it makes the scope due at once, and the sweep deletes it as a pod of an old
-- deploy_ver.
local DRAINING = 'draining'

-- published_config reads fields of the scope's published config (k.config), deleted or
-- not, checking first that the scope is known and that Redis still has its data
-- (k.epoch). Returns the fields, or nil and the answer to give: {"NO_SCOPE"} |
-- {"EPOCH_LOST"}.
local function published_config(k, ...)
  local cfg = redis.call('HMGET', k.config, ...)
  if not cfg[1] then
    return nil, {'NO_SCOPE'}
  end
  if redis.call('EXISTS', k.epoch) == 0 then
    return nil, {'EPOCH_LOST'}
  end
  return cfg
end

-- scope_config is published_config for a live scope: a deleted one answers
-- {"NO_SCOPE"} too, so it takes no new session, hold or deploy.
local function scope_config(k, ...)
  local cfg, refused = published_config(k, ...)
  if cfg and redis.call('HEXISTS', k.config, 'deleted') == 1 then
    return nil, {'NO_SCOPE'}
  end
  return cfg, refused
end

-- Lowered capacity. A class B change that lowers pod_concurrency touches no pod: the
-- slots taken before stay, so a pod may hold more than the new limit. New placement
-- follows the new limit at once: a pod with pod_concurrency slots or more takes no new
-- session, claim, hold, follower or grant, and a slot freed on a pod that is still at
-- the limit or over it after the slot is gone is not handed on (hand_off) but freed, so
-- the pod drains to the limit; only then are its freed slots handed on again.

-- A change that lowers max_pods touches no pod either: a scope may keep more pods than
-- max_pods. No deploy starts, no pod is adopted and no follower joins a room while pods
-- + deploys are at max_pods or over, and the pods beyond max_pods are surplus
-- (surplus_pods): they take no new session, claim, hold or grant, and go when idle
-- (the due sweep deletes an idle surplus pod at once; it is not kept warm, nor counted
-- toward min_idle_pods).

-- surplus_pods is the set of the current version's pods beyond max_pods (pod -> true),
-- empty while the scope has at most max_pods pods. The pods of another deploy_ver
-- count first (they take nothing and go as they empty anyway), then the current
-- version's idle pods, the first to go idle first, then its busy pods, the last
-- registered first: the surplus are those most nearly gone.
local function surplus_pods(k, ver, max_pods)
  local set = {}
  local excess = redis.call('ZCARD', k.pods) - max_pods
  if excess <= 0 then
    return set
  end
  local current = {}
  for _, pod in ipairs(redis.call('ZRANGE', k.pods, 0, -1)) do
    if redis.call('HGET', k.podver, pod) == ver then
      current[#current + 1] = pod
    else
      excess = excess - 1
    end
  end
  for _, pod in ipairs(redis.call('ZRANGE', k.idle, 0, -1)) do
    if excess <= 0 then
      return set
    end
    if redis.call('HGET', k.podver, pod) == ver then
      set[pod] = true
      excess = excess - 1
    end
  end
  for i = #current, 1, -1 do
    if excess <= 0 then
      return set
    end
    if not set[current[i]] then
      set[current[i]] = true
      excess = excess - 1
    end
  end
  return set
end

-- NO_SLOT is the note (claimpod) of a follower that its deploy's pod had no slot for:
-- pod_concurrency was lowered while it deployed, below what its room had let in. The
-- follower acquires again (follower_wait.lua answers "retry").
local NO_SLOT = '!no slot left for it on the pod: pod_concurrency was lowered while it deployed'

-- Prewarm rollouts (SPEC §11.3). A class A change under rollout "prewarm"
-- (scope_publish.lua) notes the deploy_ver it replaces in the config HASH
-- (prewarm_ver) and until when its pods may still take new sessions (prewarm_until:
-- the change's time + ready_timeout_s). Until then the pods of that version take new
-- sessions, claims, holds and grants as the current version's do, and the refill
-- deploys max(1, min_idle_pods) pods of the new one (pod_placeholder.lua); the
-- register of the last of those ends the prewarm (pod_register.lua deletes both
-- fields), and so does the time. From then on the old pods drain as under "drain".

-- prewarm_of is the prewarm's version at now from the config's prewarm_ver and
-- prewarm_until (as HMGET reads them), nil when it is over or there is none.
local function prewarm_of(ver, ends, now)
  if ver and now < tonumber(ends) then
    return ver
  end
  return nil
end

-- prewarm_ver is the deploy_ver whose pods take new sessions besides the current one
-- at now, nil when no prewarm runs.
local function prewarm_ver(k, now)
  local p = redis.call('HMGET', k.config, 'prewarm_ver', 'prewarm_until')
  return prewarm_of(p[1], p[2], now)
end

-- serves tells whether a pod of version v takes new slots: one of the current
-- deploy_ver ver, or of prev, the version a prewarm still serves (nil: none).
local function serves(v, ver, prev)
  return v ~= false and v ~= nil and (v == ver or v == prev)
end

-- Served counts (SPEC §11.3, max_sessions_per_pod). While the scope has a limit, each
-- slot handed out on a pod counts in k.served when it is taken (a session placed on
-- it, a claim, a hold or a grant; a claim that becomes a session counts once, a claim
-- given back unused counts too). The slot that reaches the limit retires the pod:
-- podver RETIRED, so it takes no new slot, its sessions and holds go on (a claim taken
-- before binds), and it is deleted once it is idle (free_slot notes it due at once).

-- served_limit is the scope's max_sessions_per_pod (0: none).
local function served_limit(k)
  return tonumber(redis.call('HGET', k.config, 'max_served') or '0')
end

-- serve counts n slots taken on pod and retires it when it has served the limit.
-- Returns true when the pod takes no more.
local function serve(k, pod, n)
  local limit = served_limit(k)
  if limit == 0 or n <= 0 then
    return false
  end
  if redis.call('HINCRBY', k.served, pod, n) < limit then
    return false
  end
  local v = redis.call('HGET', k.podver, pod)
  if v ~= RETIRED and v ~= DRAINING then
    redis.call('HSET', k.podver, pod, RETIRED)
  end
  return true
end

-- handoff describes where the slots a script frees go: the scope's keys k (its config
-- says the deploy_ver, the only version whose pods' slots are handed on, with the
-- version a prewarm still serves, its pod_concurrency and max_pods; the queue is
-- k.waiters and k.queue, the grants go to k.claims and k.claimpod and the wake-ups to
-- k.wake), the script's now, the deadline of a grant and the publish command (PUBLISH,
-- or SPUBLISH on a cluster). Its demand field says whether freed slots are counted
-- (demand_note).
local function handoff(k, now, grant_deadline, publish)
  local cfg = redis.call('HMGET', k.config, 'deploy_ver', 'pod_concurrency', 'max_pods', 'prewarm_ver', 'prewarm_until',
    'warm_policy')
  return {ver = cfg[1], prev = prewarm_of(cfg[4], cfg[5], now), pc = tonumber(cfg[2]), max_pods = tonumber(cfg[3]), k = k,
    now = now, grant_deadline = grant_deadline, publish = publish, demand = cfg[6] == 'demand'}
end

-- drop_waiters drops the waiters past their deadline (from the queue too).
local function drop_waiters(q)
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', q.k.waiters, '-inf', q.now)) do
    redis.call('ZREM', q.k.queue, w)
    redis.call('ZREM', q.k.waiters, w)
  end
end

-- next_waiter takes the oldest live waiter out of the queue, dropping the expired ones
-- on the way. Returns its id, or nil when nobody waits.
local function next_waiter(q)
  while true do
    local w = redis.call('ZRANGE', q.k.queue, 0, 0)[1]
    if not w then
      return nil
    end
    redis.call('ZREM', q.k.queue, w)
    local deadline = redis.call('ZSCORE', q.k.waiters, w)
    if deadline and tonumber(deadline) > q.now then
      return w
    end
    redis.call('ZREM', q.k.waiters, w)
  end
end

-- grant gives waiter w a slot of pod that the script already counts (and serves),
-- and wakes only w.
local function grant(q, w, pod)
  serve(q.k, pod, 1)
  redis.call('ZADD', q.k.claims, q.grant_deadline, w)
  note_due(q.grant_deadline)
  redis.call('HSET', q.k.claimpod, w, pod)
  redis.call(q.publish, q.k.wake, w)
end

-- hand_off passes a slot being freed on pod, which holds n slots with it, to the oldest
-- live waiter when the pod is of the current deploy_ver (or of the one a prewarm
-- serves), not over pod_concurrency (n at most the limit: handed on, the slot keeps n)
-- and not beyond max_pods. Returns true when it did (the slot stays counted).
local function hand_off(q, pod, n)
  if not q or not q.ver or n > q.pc or not serves(redis.call('HGET', q.k.podver, pod), q.ver, q.prev) then
    return false
  end
  if surplus_pods(q.k, q.ver, q.max_pods)[pod] then
    return false
  end
  local w = next_waiter(q)
  if not w then
    return false
  end
  grant(q, w, pod)
  return true
end

-- recycle_delete retires a pod of the current deploy_ver (or of the one a prewarm
-- serves) whose last slot was freed in a scope with recycle "delete" (SPEC §11.3):
-- RETIRED, it is never handed out again, and the due sweep deletes it at once when it
-- has gone idle. Returns true when it did.
local function recycle_delete(k, pod, now)
  if not k.config then
    return false
  end
  local cfg = redis.call('HMGET', k.config, 'recycle', 'deploy_ver')
  if cfg[1] ~= 'delete' or not serves(redis.call('HGET', k.podver, pod), cfg[2], prewarm_ver(k, now)) then
    return false
  end
  redis.call('HSET', k.podver, pod, RETIRED)
  return true
end

-- free_slot gives back one slot of a registered pod: to the oldest waiter when q (a
-- handoff) has one, else the pod goes idle when it was the last slot and idle_on_zero is
-- true (retired first under recycle "delete"; a retired or draining pod is due at
-- once). A slot freed on a pod of the current version that stays in the pool counts
-- for the demand (demand_note). Returns the slots left, or -1 for an unknown pod.
local function free_slot(k, pod, now, idle_on_zero, q)
  if not redis.call('ZSCORE', k.pods, pod) then
    return -1
  end
  local held = tonumber(redis.call('HGET', k.slots, pod) or '0')
  if hand_off(q, pod, held) then
    return held
  end
  local n = redis.call('HINCRBY', k.slots, pod, -1)
  if q and q.demand and redis.call('HGET', k.podver, pod) == q.ver
    and not (n <= 0 and idle_on_zero and redis.call('HGET', k.config, 'recycle') == 'delete') then
    demand_note(k, now, 'out', true)
  end
  if n <= 0 then
    n = 0
    redis.call('HSET', k.slots, pod, 0)
    if idle_on_zero then
      local recycled = recycle_delete(k, pod, now)
      if redis.call('ZADD', k.idle, 'NX', now, pod) == 1 then
        local v = redis.call('HGET', k.podver, pod)
        if v == DRAINING or v == RETIRED then
          note_due(now)
        else
          note_idle(k, now)
        end
      end
      if recycled then
        note_due(now)
      end
    end
  end
  return n
end

-- holds_pod tells a claimpod value that names a pod from a failure note.
local function holds_pod(v)
  return v and v ~= '' and string.sub(v, 1, 1) ~= '!'
end

-- release_claim drops one claim and frees its slot (see free_slot). Returns the pod
-- ('' if none) and the slots left on it.
local function release_claim(k, claim, now, idle_on_zero, q)
  local pod = redis.call('HGET', k.claimpod, claim)
  redis.call('ZREM', k.claims, claim)
  redis.call('HDEL', k.claimpod, claim)
  if holds_pod(pod) then
    return pod, free_slot(k, pod, now, idle_on_zero, q)
  end
  return '', -1
end

-- expire_claims drops the claims whose holders never bound them by their deadline
-- (expired holds and grants too); their slots go to waiters or idle. Returns how many.
local function expire_claims(k, now, q)
  local gone = redis.call('ZRANGEBYSCORE', k.claims, '-inf', now)
  for _, c in ipairs(gone) do
    release_claim(k, c, now, true, q)
  end
  return #gone
end

-- LOST marks the note of a lost deploy: "!" .. LOST .. reason.
local LOST = 'lost:'

-- fail_followers empties the room of one deploy and leaves each follower a note with
-- the reason, kept until deadline so a polling follower learns at once. A deploy that
-- failed (the image, the timeout, the pod died) fails its followers: a retry would fail
-- alike. One that was lost (lost true: its leader died or lost its lease, or Redis was
-- too slow for its register) sends them to try again: the next acquire may lead a
-- deploy of its own.
local function fail_followers(k, member, reason, deadline, lost)
  local prefix = member .. '|'
  local note = '!' .. reason
  if lost then
    note = '!' .. LOST .. reason
  end
  local n = 0
  for _, f in ipairs(redis.call('ZRANGE', k.followers, 0, -1)) do
    if string.sub(f, 1, #prefix) == prefix then
      local c = string.sub(f, #prefix + 1)
      redis.call('ZREM', k.followers, f)
      redis.call('ZADD', k.claims, deadline, c)
      note_due(deadline)
      redis.call('HSET', k.claimpod, c, note)
      n = n + 1
    end
  end
  return n
end

-- expire_deploys drops deploy leases whose leader stopped extending them (it died);
-- their deploys are lost, not failed, so their followers try again. It also drops room
-- entries past their own deadline.
local function expire_deploys(k, now, note_deadline)
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', k.deploying, '-inf', now)) do
    redis.call('ZREM', k.deploying, d)
    fail_followers(k, d, 'the deploy lease expired: its leader is gone', note_deadline, true)
  end
  redis.call('ZREMRANGEBYSCORE', k.followers, '-inf', now)
end

-- deploy_started notes when a new deploy lease started, for the deploy time estimate,
-- and drops the start times of deploys no longer in flight (leases that expired).
local function deploy_started(k, member, now)
  for _, f in ipairs(redis.call('HKEYS', k.dstats)) do
    if string.sub(f, 1, 6) == 'start:' and not redis.call('ZSCORE', k.deploying, string.sub(f, 7)) then
      redis.call('HDEL', k.dstats, f)
    end
  end
  redis.call('HSET', k.dstats, 'start:' .. member, now)
end

-- Refill backoff (SPEC §11.3). deploy_abort.lua counts the failed deploys of the
-- current deploy_ver in k.backoff and sets until to the failure's time + base *
-- 2^(failures - 1), at most the cap. Before until no deploy starts (a route or a hold
-- that would lead one, the warm-pool refill); from then on one at a time: a deploy
-- starts only while none is in flight, and its failure moves until on, so at most one
-- deploy per backoff period tries again. A warm pod and a place in the room of a
-- deploy in flight are taken as ever. A registered pod of the current deploy_ver
-- (pod_register.lua) and a new deploy_ver (scope_publish.lua) delete the key.

-- backoff_refusal is the answer to a deploy the scope's backoff holds back, with the
-- number of deploys in flight, nil when a deploy may start:
-- {"backoff", failures, until (ms), last error, deploys in flight}.
local function backoff_refusal(k, now, deploys)
  local b = redis.call('HMGET', k.backoff, 'failures', 'until', 'error')
  if not b[1] or (now >= tonumber(b[2]) and deploys == 0) then
    return nil
  end
  return {'backoff', b[1], b[2], b[3] or '', tostring(deploys)}
end

-- expire_pool drops the expired claims, then the expired deploy leases (sending their
-- followers to try again) and room entries: the leftovers of crashed callers and leaders.
local function expire_pool(k, now, note_deadline, q)
  expire_claims(k, now, q)
  expire_deploys(k, now, note_deadline)
end

-- evict_session unbinds one session and frees its slot (see free_slot). Returns the pod
-- it was on.
local function evict_session(k, sid, now, q)
  local pod = redis.call('HGET', k.sessions, sid)
  redis.call('HDEL', k.sessions, sid)
  redis.call('ZREM', k.sexp, sid)
  redis.call('SREM', k.fixed, sid)
  if pod then
    free_slot(k, pod, now, true, q)
  end
  return pod
end
