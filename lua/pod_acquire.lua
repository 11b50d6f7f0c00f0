-- pod_acquire.lua: hand out a warm pod of the current deploy_ver, else a place in the
-- room of a deploy in flight, else a new deploy lease, else max_reached.
-- KEYS[1]  {s}:epoch      STRING scope epoch (missing = Redis lost its data)
-- KEYS[2]  {s}:config     HASH   published scope config
-- KEYS[3]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[5]  {s}:podinfo    HASH   pod id -> pod JSON
-- KEYS[6]  {s}:slots      HASH   pod id -> sessions + claims
-- KEYS[7]  {s}:idle       ZSET   pod id -> idle since (ms)
-- KEYS[8]  {s}:deploying  ZSET   deploy member -> lease deadline (ms)
-- KEYS[9]  {s}:followers  ZSET   "<deploy>|<claim>" -> deadline (ms)
-- KEYS[10] {s}:claims     ZSET   claim id -> deadline (ms)
-- KEYS[11] {s}:claimpod   HASH   claim id -> pod id | "!reason"
-- KEYS[12] {s}:fence      STRING fencing counter
-- KEYS[13] {s}:waiters    ZSET   waiter id -> deadline (ms)
-- KEYS[14] {s}:queue      ZSET   waiter id -> arrival number
-- KEYS[15] {s}:wake       the scope's wake-up channel
-- KEYS[16] {s}:dstats     HASH   deploy time estimate and start times of deploys in flight
-- ARGV[1] now (ms)  ARGV[2] claim id  ARGV[3] claim deadline (ms)
-- ARGV[4] lease deadline (ms)  ARGV[5] room margin (ms): a follower waits up to the
-- scope's ready timeout plus this margin
-- ARGV[6] grant deadline (ms)  ARGV[7] publish command (expired claims' slots go to
-- waiters first)
-- Returns {"warm", pod, pod JSON} | {"follower", deploy member, room member, room deadline}
--       | {"deploy", deploy member, fence, deploy spec JSON}
--       | {"max_reached", pods, deploys} | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work: Store.call appends the scope's config and due keys to KEYS (taken off
-- before this runs); the answer is then {"DUE", due, answer} when a note moved the due time.
local now = tonumber(ARGV[1])
local claim = ARGV[2]
local cfg, refused = scope_config(KEYS[1], KEYS[2], 'deploy_ver', 'max_pods', 'parallel', 'pod_concurrency', 'deploy', 'ready_ms')
if not cfg then
  return refused
end
local ver, max_pods, parallel, pc = cfg[1], tonumber(cfg[2]), tonumber(cfg[3]), tonumber(cfg[4])
local q = handoff(KEYS[2], KEYS[4], KEYS[10], KEYS[11], KEYS[13], KEYS[14], KEYS[15], now, ARGV[6], ARGV[7])
expire_pool(KEYS[3], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], now, ARGV[3], q)

-- 1. Warm: the most recently idled pod of the current version (older ones age out),
-- not one beyond max_pods.
local surplus = surplus_pods(ver, max_pods, KEYS[3], KEYS[4], KEYS[7])
for _, pod in ipairs(redis.call('ZREVRANGE', KEYS[7], 0, -1)) do
  if redis.call('HGET', KEYS[4], pod) == ver and not surplus[pod] then
    redis.call('ZREM', KEYS[7], pod)
    redis.call('HINCRBY', KEYS[6], pod, 1)
    redis.call('ZADD', KEYS[10], ARGV[3], claim)
    redis.call('HSET', KEYS[11], claim, pod)
    note_due(ARGV[3])
    note_fill()
    return {'warm', pod, redis.call('HGET', KEYS[5], pod) or ''}
  end
end

-- 2. Follow: the oldest deploy in flight whose room has space, unless pods + deploys
-- are over max_pods (lowered since). The follower gate adds first and removes itself
-- when over capacity, never checking before adding.
local deploys = redis.call('ZRANGE', KEYS[8], 0, -1)
table.sort(deploys, function(a, b) return tonumber(string.match(a, '^%d+')) < tonumber(string.match(b, '^%d+')) end)
local rooms = redis.call('ZRANGE', KEYS[9], 0, -1)
local npods = redis.call('ZCARD', KEYS[3])
if npods + #deploys <= max_pods then
  for _, d in ipairs(deploys) do
    -- a warm-pool deploy has no leader session, so its whole pod is room
    local cap = pc - 1
    if string.sub(d, -1) == 'w' then
      cap = pc
    end
    if cap > 0 then
      local member = d .. '|' .. claim
      local deadline = now + tonumber(cfg[6]) + tonumber(ARGV[5])
      redis.call('ZADD', KEYS[9], deadline, member)
      local prefix = d .. '|'
      local n = 1
      for _, f in ipairs(rooms) do
        if string.sub(f, 1, #prefix) == prefix then
          n = n + 1
        end
      end
      if n <= cap then
        note_due(deadline)
        return {'follower', d, member, tostring(deadline)}
      end
      redis.call('ZREM', KEYS[9], member)
    end
  end
end

-- 3. Lead: a new deploy while pods + deploys stay within max_pods and the parallel bound.
if npods + #deploys < max_pods and #deploys < parallel then
  local fence = redis.call('INCR', KEYS[12])
  local member = tostring(fence)
  redis.call('ZADD', KEYS[8], ARGV[4], member)
  deploy_started(KEYS[16], KEYS[8], member, now)
  note_due(ARGV[4])
  return {'deploy', member, member, cfg[5]}
end
return {'max_reached', tostring(npods), tostring(#deploys)}
