-- lib/due.lua: sweep due times. A script that leaves the sweeper work for later (a
-- deadline in a ZSET, an idle pod's pod_ttl_s, a pool to refill to min_idle_pods) notes
-- when that work falls due in the scope's due key (STRING, ms), which only ever moves
-- earlier here; the sweeper's scope_due.lua sets it to the scope's next due time after
-- a visit. Only the scripts lua.go marks notes get this include (they take the config
-- and due keys), and they get it whenever they note, directly or through a helper:
-- lua.go runs their body as main() and answers due_reply(main()), so when a note moved
-- the due time the caller (Store.call) gets {"DUE", due, answer} back and moves the
-- scope in its shard's due index.

-- due is where the script's notes go: the scope's due key and config (from the
-- script's KEYS), the due time read (cur, false when none) and the earliest note made
-- (noted).
local due = {}
do
  local k = scope_keys(KEYS)
  due.key, due.config = k.due, k.config
end

-- note_due notes work of the scope due at t (ms; 0 = at once).
local function note_due(t)
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

-- note_idle notes a pod gone idle at now: reclaim looks at it when pod_ttl_s has
-- passed, or at once in a deleted scope, whose pods are deleted as they go idle, and in
-- a scope with more pods (k.pods) than max_pods, whose idle pods may be surplus.
local function note_idle(k, now)
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
  local cfg = redis.call('HMGET', due.config, 'min_idle', 'warm_policy')
  if tonumber(cfg[1] or '0') > 0 or cfg[2] == 'demand' then
    note_due(0)
  end
end

-- due_reply is the answer of the script, r, with the due note when one moved the due
-- time (lua.go returns it).
local function due_reply(r)
  if due.noted then
    return {'DUE', tostring(due.noted), r}
  end
  return r
end
