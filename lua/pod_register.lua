-- pod_register.lua: commit a deployed pod under its deploy lease. The pod goes to the
-- leader's claim and its followers' claims (their slots are theirs), up to
-- pod_concurrency (a follower beyond it gets the NO_SLOT note); when it is of the
-- current deploy_ver, its other slots go to queued waiters, oldest first; a pod nobody
-- takes goes idle. The deploy's time, from its start to now, moves the scope's deploy
-- time estimate (an exponentially weighted moving average, weight 0.3 for the newest).
-- KEYS[1]  {s}:epoch      STRING scope epoch
-- KEYS[2]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[3]  {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[4]  {s}:podinfo    HASH   pod id -> pod JSON
-- KEYS[5]  {s}:slots      HASH   pod id -> sessions + claims
-- KEYS[6]  {s}:idle       ZSET   pod id -> idle since (ms)
-- KEYS[7]  {s}:deploying  ZSET   deploy member -> lease deadline (ms)
-- KEYS[8]  {s}:followers  ZSET   "<deploy>|<claim>" -> deadline (ms)
-- KEYS[9]  {s}:claims     ZSET   claim id -> deadline (ms)
-- KEYS[10] {s}:claimpod   HASH   claim id -> pod id | "!reason"
-- KEYS[11] {s}:config     HASH   published scope config
-- KEYS[12] {s}:waiters    ZSET   waiter id -> deadline (ms)
-- KEYS[13] {s}:queue      ZSET   waiter id -> arrival number
-- KEYS[14] {s}:wake       the scope's wake-up channel
-- KEYS[15] {s}:dstats     HASH   "est" -> deploy time estimate (ms), "start:<member>" -> start (ms)
-- ARGV[1] now (ms)  ARGV[2] deploy member  ARGV[3] pod id  ARGV[4] deploy_ver
-- ARGV[5] pod JSON  ARGV[6] leader claim id ("" for none)  ARGV[7] claim deadline (ms)
-- ARGV[8] grant deadline (ms)  ARGV[9] publish command
-- Returns {"ok", slots} | {"FENCED"} (the lease is gone: commit nothing) | {"EPOCH_LOST"}
-- A pod the pool has already is answered {"ok", its slots} and nothing changes: its
-- leader tries the register again when Redis did not answer, and the try it never got
-- the answer of may have committed it.
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
local now = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'EPOCH_LOST'}
end
if redis.call('ZSCORE', KEYS[2], ARGV[3]) then
  return {'ok', redis.call('HGET', KEYS[5], ARGV[3]) or '0'}
end
-- Fencing: only the live holder of this deploy's lease may commit; an expired lease
-- means the deploy was given up and its number is stale.
local lease = redis.call('ZSCORE', KEYS[7], ARGV[2])
if not lease or tonumber(lease) <= now then
  return {'FENCED'}
end
redis.call('ZREM', KEYS[7], ARGV[2])
local started = redis.call('HGET', KEYS[15], 'start:' .. ARGV[2])
if started then
  redis.call('HDEL', KEYS[15], 'start:' .. ARGV[2])
  local took = math.max(0, now - tonumber(started))
  local est = redis.call('HGET', KEYS[15], 'est')
  if est then
    took = math.floor(tonumber(est) + 0.3 * (took - tonumber(est)) + 0.5)
  end
  redis.call('HSET', KEYS[15], 'est', took)
end
local pod = ARGV[3]
redis.call('ZADD', KEYS[2], now, pod)
redis.call('HSET', KEYS[3], pod, ARGV[4])
redis.call('HSET', KEYS[4], pod, ARGV[5])

-- The leader's claim first, then the followers in the room's order, up to
-- pod_concurrency: a follower let in before a change lowered it gets no slot on a pod
-- at the limit, but a note that sends it to acquire again (NO_SLOT).
local cfg = redis.call('HMGET', KEYS[11], 'deploy_ver', 'pod_concurrency', 'max_pods')
local pc = tonumber(cfg[2])
local n = 0
if ARGV[6] ~= '' then
  redis.call('ZADD', KEYS[9], ARGV[7], ARGV[6])
  redis.call('HSET', KEYS[10], ARGV[6], pod)
  n = n + 1
end
local prefix = ARGV[2] .. '|'
for _, f in ipairs(redis.call('ZRANGE', KEYS[8], 0, -1)) do
  if string.sub(f, 1, #prefix) == prefix then
    local c = string.sub(f, #prefix + 1)
    redis.call('ZREM', KEYS[8], f)
    redis.call('ZADD', KEYS[9], ARGV[7], c)
    if n < pc then
      redis.call('HSET', KEYS[10], c, pod)
      n = n + 1
    else
      redis.call('HSET', KEYS[10], c, NO_SLOT)
    end
  end
end
-- its free slots go to waiters, unless it is beyond max_pods (lowered since it started)
if cfg[1] == ARGV[4] and not surplus_pods(cfg[1], tonumber(cfg[3]), KEYS[2], KEYS[3], KEYS[6])[pod] then
  local q = handoff(KEYS[11], KEYS[3], KEYS[9], KEYS[10], KEYS[12], KEYS[13], KEYS[14], now, ARGV[8], ARGV[9])
  while n < pc do
    local w = next_waiter(q)
    if not w then
      break
    end
    grant(q, w, pod)
    n = n + 1
  end
end
redis.call('HSET', KEYS[5], pod, n)
if n == 0 then
  redis.call('ZADD', KEYS[6], now, pod)
  note_idle(now, KEYS[2])
end
if n > 0 then
  note_due(ARGV[7])
end
-- a warm-pool deploy may be one of several the scope lacks
note_fill()
return {'ok', tostring(n)}
