-- pod_register.lua: commit a deployed pod under its deploy lease. The pod goes to the
-- leader's claim and its followers' claims (their slots are theirs), up to
-- pod_concurrency (a follower beyond it gets the NO_SLOT note); when it is of the
-- current deploy_ver, its other slots go to queued waiters, oldest first; a pod nobody
-- takes goes idle. The deploy's time, from its start to now, moves the scope's deploy
-- time estimate (an exponentially weighted moving average, weight 0.3 for the newest).
-- A pod of the current deploy_ver ends the refill backoff, and the prewarm of a
-- rollout when it is the last of the max(1, min_idle_pods) the prewarm waits for. The
-- slots it hands out count toward max_sessions_per_pod (serve in lib/served.lua). One
-- message naming the deploy (DeployWaiter) on the scope's wake channel wakes its followers.
-- KEYS: epoch config pods podver podinfo slots idle deploying followers claims claimpod
--       waiters queue wake dstats due backoff served demand free freeprev warm warmprev
--       busy surplus podclaims rooms open
-- uses: claimpod due handoff index served surplus
-- ARGV[1] now (ms)  ARGV[2] deploy member  ARGV[3] pod id  ARGV[4] deploy_ver
-- ARGV[5] pod JSON  ARGV[6] leader claim id ("" for none)  ARGV[7] claim deadline (ms)
-- ARGV[8] grant deadline (ms)  ARGV[9] publish command
-- Returns {"ok", slots} | {"FENCED"} (the lease is gone: commit nothing) | {"EPOCH_LOST"}
-- A pod the pool has already is answered {"ok", its slots} and nothing changes: its
-- leader tries the register again when Redis did not answer, and the try it never got
-- the answer of may have committed it.
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
if redis.call('EXISTS', k.epoch) == 0 then
  return {'EPOCH_LOST'}
end
if redis.call('ZSCORE', k.pods, ARGV[3]) then
  return {'ok', redis.call('HGET', k.slots, ARGV[3]) or '0'}
end
-- Fencing: only the live holder of this deploy's lease may commit; an expired lease
-- means the deploy was given up and its number is stale.
local lease = redis.call('ZSCORE', k.deploying, ARGV[2])
if not lease or tonumber(lease) <= now then
  return {'FENCED'}
end
redis.call('ZREM', k.deploying, ARGV[2])
room_index(k, ARGV[2])
local started = redis.call('HGET', k.dstats, 'start:' .. ARGV[2])
if started then
  redis.call('HDEL', k.dstats, 'start:' .. ARGV[2])
  local took = math.max(0, now - tonumber(started))
  local est = redis.call('HGET', k.dstats, 'est')
  if est then
    took = math.floor(tonumber(est) + 0.3 * (took - tonumber(est)) + 0.5)
  end
  redis.call('HSET', k.dstats, 'est', took)
end
local pod = ARGV[3]
redis.call('ZADD', k.pods, now, pod)
redis.call('HSET', k.podver, pod, ARGV[4])
redis.call('HSET', k.podinfo, pod, ARGV[5])

-- The leader's claim first, then the followers in the room's order, up to
-- pod_concurrency: a follower let in before a change lowered it gets no slot on a pod
-- at the limit, but a note that sends it to acquire again (NO_SLOT).
local cfg = redis.call('HMGET', k.config, 'deploy_ver', 'pod_concurrency', 'min_idle')
local pc = tonumber(cfg[2])
local n = 0
if ARGV[6] ~= '' then
  redis.call('ZADD', k.claims, ARGV[7], ARGV[6])
  claim_set(k, ARGV[6], pod)
  n = n + 1
end
local prefix = ARGV[2] .. '|'
local room = room_members(k, ARGV[2])
for _, f in ipairs(room) do
  local c = string.sub(f, #prefix + 1)
  redis.call('ZREM', k.followers, f)
  redis.call('ZREM', k.rooms, f)
  redis.call('ZADD', k.claims, ARGV[7], c)
  if n < pc then
    claim_set(k, c, pod)
    n = n + 1
  else
    claim_set(k, c, NO_SLOT)
  end
end
if #room > 0 then
  -- the followers wait on the scope's wake channel under the deploy's name
  redis.call(ARGV[9], k.wake, 'deploy:' .. ARGV[2])
end
-- the pod is indexed with the slots its claims hold, then with the rest of its state
redis.call('HSET', k.slots, pod, n)
pod_index(k, pod)
local spent = serve(k, pod, n)
if cfg[1] == ARGV[4] then
  redis.call('DEL', k.backoff)
  if prewarm_ver(k, now) then
    -- the current version's pods: the idle ones and the busy ones
    local ready = redis.call('ZCARD', k.warm) + redis.call('ZCARD', k.busy)
    if ready >= math.max(1, tonumber(cfg[3])) then
      redis.call('HDEL', k.config, 'prewarm_ver', 'prewarm_until')
      -- the old version's pods are of no version the indexes follow now
      redis.call('DEL', k.freeprev, k.warmprev)
      ix_reload()
      -- the old version's idle pods go now
      note_due(now)
    end
  end
end
-- its free slots go to waiters, unless it is beyond max_pods (lowered since it started)
-- or has served max_sessions_per_pod
if cfg[1] == ARGV[4] and not spent and not is_surplus(k, pod) then
  local q = handoff(k, now, ARGV[8], ARGV[9])
  while n < pc and redis.call('HGET', k.podver, pod) == cfg[1] do
    local w = next_waiter(q)
    if not w then
      break
    end
    grant(q, w, pod)
    n = n + 1
    redis.call('HSET', k.slots, pod, n)
    pod_index(k, pod)
  end
end
if n == 0 then
  redis.call('ZADD', k.idle, now, pod)
  pod_index(k, pod)
  note_idle(k, now)
end
if n > 0 then
  note_due(ARGV[7])
end
-- a warm-pool deploy may be one of several the scope lacks
note_fill()
return {'ok', tostring(n)}
