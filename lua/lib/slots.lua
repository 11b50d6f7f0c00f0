-- lib/slots.lua: freeing a slot: a claim given back or expired, a session ended or
-- evicted; the slot goes to a waiter (handoff.lua), or the pod idles, or a recycled
-- pod retires.
-- uses: config claimpod surplus demand handoff due index

-- hold_conf is the field of a hold's session_config in the sconf HASH: no session id
-- holds a "|", so it never names a session's.
local function hold_conf(claim)
  return 'hold|' .. claim
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
  pod_index(k, pod)
  return true
end

-- free_slot gives back one slot of a registered pod: to the oldest waiter when q (a
-- handoff) has one, else the pod goes idle when it was the last slot and idle_on_zero
-- is true (retired first under recycle "delete"; a retired or draining pod is due at
-- once). A slot freed on a pod of the current version that stays in the pool counts for
-- the demand (demand_note). Returns the slots left, or -1 for an unknown pod.
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
  pod_index(k, pod)
  return n
end

-- drop_claim drops one claim and a hold's session_config, its slot left as it is (a
-- session bound in its place takes it over). Returns its claimpod entry (nil if none).
local function drop_claim(k, claim)
  redis.call('ZREM', k.claims, claim)
  redis.call('HDEL', k.sconf, hold_conf(claim))
  return claim_del(k, claim)
end

-- release_claim drops one claim (drop_claim) and frees its slot (see free_slot).
-- Returns the pod ('' if none) and the slots left on it.
local function release_claim(k, claim, now, idle_on_zero, q)
  local pod = drop_claim(k, claim)
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

-- evict_session unbinds one session, drops its session_config and frees its slot (see free_slot). Returns the pod
-- it was on.
local function evict_session(k, sid, now, q)
  local pod = session_unbind(k, sid)
  redis.call('ZREM', k.sexp, sid)
  redis.call('SREM', k.fixed, sid)
  redis.call('HDEL', k.sconf, sid)
  if pod then
    free_slot(k, pod, now, true, q)
  end
  return pod
end
