-- pod_placeholder.lua: reserve a deploy lease for the warm pool (autoscale) while the
-- scope has fewer idle pods of the current version than it keeps (idle_target:
-- min_idle_pods, or the demand policy's target), counting warm deploys already in
-- flight; during the prewarm of a rollout, at least one. Counts toward max_pods; never
-- takes an idle pod.
-- KEYS: epoch config pods podver slots idle deploying followers claims claimpod fence
--       waiters queue wake dstats due backoff served demand sconf free freeprev warm
--       warmprev busy surplus podclaims rooms open
-- uses: config demand deploy due expire handoff quota refill
-- ARGV[1] now (ms)  ARGV[2] lease deadline (ms)  ARGV[3] note deadline (ms)
-- ARGV[4] grant deadline (ms)  ARGV[5] publish command (expired claims' slots go to
-- waiters first)  ARGV[6] the sweep's tick (ms), for the demand target (idle_target)
-- Returns {"deploy", deploy member, fence, deploy spec JSON, report interval (ms; "0": the
--          config has none), for the pod's env} | {"enough"}
--       | {"max_reached"} | {"busy"} (parallel bound)
--       | {"backoff", failures, until, last error, deploys} (the refill backoff)
--       | {"quota", "pods", held, allowance, tenant, cpu_m, memory_b} (lib/quota.lua)
--       | {"NO_SCOPE"} | {"EPOCH_LOST"}
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local now = tonumber(ARGV[1])
local cfg, refused = scope_config(k, 'deploy_ver', 'max_pods', 'parallel', 'deploy', 'report_ms', 'q_pods')
if not cfg then
  return refused
end
local max_pods, parallel = tonumber(cfg[2]), tonumber(cfg[3])
local keep = idle_target(k, now, tonumber(ARGV[6]))
local q = handoff(k, now, ARGV[4], ARGV[5])
expire_pool(k, now, ARGV[3], q)

-- a warm deploy, unless the pool has its warm pods (a surplus idle pod not counted) or no room
local refused = refill_refusal(k, now, keep, max_pods, parallel)
  or quota_refusal(k, 'pods', redis.call('ZCARD', k.pods) + redis.call('ZCARD', k.deploying), cfg[6])
if refused then
  return refused
end
local fence = redis.call('INCR', k.fence)
local member = fence .. 'w'
redis.call('ZADD', k.deploying, ARGV[2], member)
deploy_started(k, member, now)
note_due(ARGV[2])
return {'deploy', member, tostring(fence), cfg[4], cfg[5] or '0'}
