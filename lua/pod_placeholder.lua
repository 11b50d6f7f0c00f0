-- pod_placeholder.lua: reserve a deploy lease for the warm pool (autoscale) while the
-- scope has fewer idle pods of the current version than it keeps (idle_target:
-- min_idle_pods, or the demand policy's target), counting warm deploys already in
-- flight; during the prewarm of a rollout, at least one. Counts toward max_pods; never
-- takes an idle pod.
-- KEYS[1]  {s}:epoch      STRING scope epoch
-- KEYS[2]  {s}:config     HASH   published scope config
-- KEYS[3]  {s}:pods       ZSET   pod id -> registered at (ms)
-- KEYS[4]  {s}:podver     HASH   pod id -> deploy_ver
-- KEYS[5]  {s}:slots      HASH   pod id -> sessions + claims
-- KEYS[6]  {s}:idle       ZSET   pod id -> idle since (ms)
-- KEYS[7]  {s}:deploying  ZSET   deploy member -> lease deadline (ms)
-- KEYS[8]  {s}:followers  ZSET   "<deploy>|<claim>" -> deadline (ms)
-- KEYS[9]  {s}:claims     ZSET   claim id -> deadline (ms)
-- KEYS[10] {s}:claimpod   HASH   claim id -> pod id | "!reason"
-- KEYS[11] {s}:fence      STRING fencing counter
-- KEYS[12] {s}:waiters    ZSET   waiter id -> deadline (ms)
-- KEYS[13] {s}:queue      ZSET   waiter id -> arrival number
-- KEYS[14] {s}:wake       the scope's wake-up channel
-- KEYS[15] {s}:dstats     HASH   deploy time estimate and start times of deploys in flight
-- KEYS[16] {s}:due        STRING when the scope's next sweep work falls due (ms)
-- KEYS[17] {s}:backoff    HASH   refill backoff: failures, until (ms), error
-- KEYS[18] {s}:served     HASH   pod id -> slots handed out over its life (max_sessions_per_pod)
-- KEYS[19] {s}:demand     HASH   slot takes and frees, decayed (warm_policy "demand")
-- ARGV[1] now (ms)  ARGV[2] lease deadline (ms)  ARGV[3] note deadline (ms)
-- ARGV[4] grant deadline (ms)  ARGV[5] publish command (expired claims' slots go to
-- waiters first)  ARGV[6] the sweep's tick (ms), for the demand target (idle_target)
-- Returns {"deploy", deploy member, fence, deploy spec JSON, report interval (ms; "0": the
--          config has none), for the pod's env} | {"enough"}
--       | {"max_reached"} | {"busy"} (parallel bound)
--       | {"backoff", failures, until, last error, deploys} (the refill backoff)
--       | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; _guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due in _lib.lua): the answer is then {"DUE", due, answer} when a
-- note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local cfg, refused = scope_config(k, 'deploy_ver', 'max_pods', 'parallel', 'deploy', 'report_ms')
if not cfg then
  return refused
end
local ver, max_pods, parallel = cfg[1], tonumber(cfg[2]), tonumber(cfg[3])
local keep = idle_target(k, now, tonumber(ARGV[6]))
local q = handoff(k, now, ARGV[4], ARGV[5])
expire_pool(k, now, ARGV[3], q)

-- an idle pod beyond max_pods is not kept warm: it does not count
local surplus = surplus_pods(k, ver, max_pods)
local warm = 0
for _, pod in ipairs(redis.call('ZRANGE', k.idle, 0, -1)) do
  if redis.call('HGET', k.podver, pod) == ver and not surplus[pod] then
    warm = warm + 1
  end
end
local deploys = redis.call('ZRANGE', k.deploying, 0, -1)
for _, d in ipairs(deploys) do
  if string.sub(d, -1) == 'w' then
    warm = warm + 1
  end
end
if prewarm_ver(k, now) then
  keep = math.max(1, keep)
end
if warm >= keep then
  return {'enough'}
end
if redis.call('ZCARD', k.pods) + #deploys >= max_pods then
  return {'max_reached'}
end
if #deploys >= parallel then
  return {'busy'}
end
local refused = backoff_refusal(k, now, #deploys)
if refused then
  return refused
end
local fence = redis.call('INCR', k.fence)
local member = fence .. 'w'
redis.call('ZADD', k.deploying, ARGV[2], member)
deploy_started(k, member, now)
note_due(ARGV[2])
return {'deploy', member, tostring(fence), cfg[4], cfg[5] or '0'}
