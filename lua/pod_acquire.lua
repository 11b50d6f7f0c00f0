-- pod_acquire.lua: hand out a warm pod of the current deploy_ver (or of the one a
-- prewarm serves), else a place in the room of a deploy in flight, else a new deploy
-- lease, else max_reached. A room takes no more followers than max_sessions_per_pod
-- lets its pod serve.
-- KEYS: epoch config pods podver podinfo slots idle deploying followers claims claimpod
--       fence waiters queue wake dstats due backoff served demand sconf free freeprev
--       warm warmprev busy surplus podclaims rooms open
-- uses: config demand deploy due expire handoff index quota refill served
-- ARGV[1] now (ms)  ARGV[2] claim id  ARGV[3] claim deadline (ms)
-- ARGV[4] lease deadline (ms)  ARGV[5] room margin (ms): a follower waits up to the
-- scope's ready timeout plus this margin
-- ARGV[6] grant deadline (ms)  ARGV[7] publish command (expired claims' slots go to
-- waiters first)
-- Returns {"warm", pod, pod JSON} | {"follower", deploy member, room member, room deadline}
--       | {"deploy", deploy member, fence, deploy spec JSON, report interval (ms; "0": the
--         config has none), for the pod's env}
--       | {"max_reached", pods, deploys}
--       | {"quota", "pods", held, allowance, tenant, cpu_m, memory_b} (a deploy it would
--         lead is beyond the scope's allowance of its tenant's quotas, lib/quota.lua)
--       | {"backoff", failures, until, last error, deploys} (a deploy it would lead is held
--         back by the refill backoff; warm pods and rooms are taken first)
--       | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local claim = ARGV[2]
local cfg, refused = scope_config(k, 'deploy_ver', 'max_pods', 'parallel', 'deploy', 'ready_ms', 'report_ms', 'q_pods')
if not cfg then
  return refused
end
local max_pods, parallel = tonumber(cfg[2]), tonumber(cfg[3])
local q = handoff(k, now, ARGV[6], ARGV[7])
expire_pool(k, now, ARGV[3], q)

-- 1. Warm: the most recently idled pod of the current version (older ones age out),
-- or of the one a prewarm serves, not one beyond max_pods.
local pod = last_warm(k, q.prev)
if pod then
  redis.call('ZREM', k.idle, pod)
  redis.call('HINCRBY', k.slots, pod, 1)
  pod_index(k, pod)
  serve(k, pod, 1)
  redis.call('ZADD', k.claims, ARGV[3], claim)
  claim_set(k, claim, pod)
  note_due(ARGV[3])
  note_fill()
  demand_note(k, now, 'in', q.demand)
  return {'warm', pod, redis.call('HGET', k.podinfo, pod) or ''}
end

-- 2. Follow: the oldest deploy in flight whose room has space (open, lib/index.lua:
-- room_cap says how many followers a room takes), unless pods + deploys are over
-- max_pods (lowered since).
local ndeploys = redis.call('ZCARD', k.deploying)
local npods = redis.call('ZCARD', k.pods)
local d = redis.call('ZRANGE', k.open, 0, 0)[1]
if d and npods + ndeploys <= max_pods then
  local member = d .. '|' .. claim
  local deadline = now + tonumber(cfg[5]) + tonumber(ARGV[5])
  room_join(k, member, deadline)
  note_due(deadline)
  demand_note(k, now, 'in', q.demand)
  return {'follower', d, member, tostring(deadline)}
end

-- 3. Lead: a new deploy while pods + deploys stay within max_pods and the parallel bound,
-- unless the refill backoff holds it back or the tenant's allowance is used up.
if npods + ndeploys < max_pods and ndeploys < parallel then
  local refused = backoff_refusal(k, now, ndeploys) or quota_refusal(k, 'pods', npods + ndeploys, cfg[7])
  if refused then
    return refused
  end
  local fence = redis.call('INCR', k.fence)
  local member = tostring(fence)
  redis.call('ZADD', k.deploying, ARGV[4], member)
  deploy_started(k, member, now)
  note_due(ARGV[4])
  demand_note(k, now, 'in', q.demand)
  if q.demand then
    note_due(0)
  end
  return {'deploy', member, member, cfg[4], cfg[6] or '0'}
end
return {'max_reached', tostring(npods), tostring(ndeploys)}
