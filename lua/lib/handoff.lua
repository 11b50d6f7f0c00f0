-- lib/handoff.lua: the fair queue's hand-off. A slot freed while waiters are queued is
-- handed to the oldest live one inside the script that frees it: the slot stays counted
-- and becomes a claim named after the waiter (a grant) with a short deadline, the
-- waiter leaves the queue, and a message naming it goes out on the scope's channel. A
-- waiter that died never binds its grant; the claim expires and its slot is handed on
-- like any other.
-- uses: surplus served due index

-- Lowered capacity. A class B change that lowers pod_concurrency touches no pod: the
-- slots taken before stay, so a pod may hold more than the new limit. New placement
-- follows the new limit at once: a pod with pod_concurrency slots or more takes no new
-- session, claim, hold, follower or grant, and a slot freed on a pod that is still at
-- the limit or over it after the slot is gone is not handed on (hand_off) but freed, so
-- the pod drains to the limit; only then are its freed slots handed on again.

-- handoff describes where the slots a script frees go: the scope's keys k (its config
-- says the deploy_ver, the only version whose pods' slots are handed on, with the
-- version a prewarm still serves, and its pod_concurrency; the queue is k.waiters and
-- k.queue, the grants go to k.claims and k.claimpod and the wake-ups to k.wake; the
-- surplus, which takes no grant, is k.surplus), the script's now, the deadline of a
-- grant and the publish command (PUBLISH, or SPUBLISH on a cluster). Its demand field
-- says whether freed slots are counted (demand_note).
local function handoff(k, now, grant_deadline, publish)
  local cfg = redis.call('HMGET', k.config, 'deploy_ver', 'pod_concurrency', 'prewarm_ver', 'prewarm_until', 'warm_policy')
  return {ver = cfg[1], prev = prewarm_of(cfg[3], cfg[4], now), pc = tonumber(cfg[2]), k = k, now = now,
    grant_deadline = grant_deadline, publish = publish, demand = cfg[5] == 'demand'}
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
  claim_set(q.k, w, pod)
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
  if is_surplus(q.k, pod) then
    return false
  end
  local w = next_waiter(q)
  if not w then
    return false
  end
  grant(q, w, pod)
  return true
end
