-- pod_adopt.lua: take a pod the driver has but Redis does not know into the pool
-- (reconcile, and the rebuild after Redis lost its data: it runs before the epoch is
-- written, so it does not check it). Within max_pods only. A pod whose sessions are
-- unknown (Redis lost them with the pod) may still be serving them: it takes no new
-- session until session_ttl_s has passed, by which time those sessions have ended or
-- expired. Every slot is held by a claim "adopted:<pod>:<n>" with that deadline; the
-- claims expire like any other (expiry sweep, routes), handing the slots on to waiters
-- or idling the pod. A pod whose sessions are known to be none goes idle at once.
-- A pod Redis knows keeps its sessions and claims; when sessions are unknown (the
-- rebuild after a failover, whose history may lack some of them) its free slots are
-- held the same way.
-- KEYS: config pods podver podinfo slots idle deploying claims claimpod due free freeprev
--       warm warmprev busy surplus podclaims | extra: gone
-- uses: due index
-- ARGV[1] now (ms)  ARGV[2] pod id  ARGV[3] deploy_ver  ARGV[4] pod JSON
-- ARGV[5] "1" when the pod's sessions are unknown, "0" when it has none
-- ARGV[6] "1" when the caller took one pod of its tenant's escrow for it: the allowance
--         q_pods of a scope governed in pods (lib/quota.lua) rises with the adoption
-- Returns {"adopted", "1"|"0" (whether the allowance rose)} | {"known"} | {"full"} (no
--         room under max_pods)
--       | {"escrow", tenant, cpu_m, memory_b}: the scope is governed in pods and the
--         caller took nothing of the escrow; nothing done (Store.PodAdopt takes the pod
--         from the escrow, whatever the quota, since it runs already, and calls again)
--       | {"gone"} (purged lately: it is being deleted, not adopted)
--       | {"NO_SCOPE"} (also for a deleted scope)
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- a note moved the scope's due time; Store.call takes the note off.
local k = scope_keys(KEYS)
local cfg = redis.call('HMGET', k.config, 'max_pods', 'pod_concurrency', 'session_ttl_ms', 'deleted')
if not cfg[1] or cfg[4] then
  return {'NO_SCOPE'}
end
local pod = ARGV[2]
local now = tonumber(ARGV[1])
local pc = tonumber(cfg[2])
if redis.call('ZSCORE', k.pods, pod) then
  if ARGV[5] == '1' then
    local slots = tonumber(redis.call('HGET', k.slots, pod) or '0')
    local n, held = 0, 0
    while slots < pc and n < 2 * pc do
      n = n + 1
      local claim = 'adopted:' .. pod .. ':' .. n
      if not redis.call('ZSCORE', k.claims, claim) then
        redis.call('ZADD', k.claims, now + tonumber(cfg[3]), claim)
        claim_set(k, claim, pod)
        slots, held = slots + 1, held + 1
      end
    end
    redis.call('HSET', k.slots, pod, slots)
    if held > 0 then
      note_due(now + tonumber(cfg[3]))
    end
    if redis.call('ZREM', k.idle, pod) == 1 then
      note_fill()
    end
    pod_index(k, pod)
  end
  return {'known'}
end
if redis.call('EXISTS', k.gone) == 1 then
  return {'gone'}
end
if redis.call('ZCARD', k.pods) + redis.call('ZCARD', k.deploying) >= tonumber(cfg[1]) then
  return {'full'}
end
-- a pod already running is use taken: its grant comes first, so the allowances never
-- count more than the escrow
local governed = redis.call('HEXISTS', k.config, 'q_pods') == 1
if governed and ARGV[6] ~= '1' then
  local t = redis.call('HMGET', k.config, 'tenant', 'cpu_m', 'memory_b')
  return {'escrow', t[1] or '', t[2] or '0', t[3] or '0'}
end
redis.call('ZADD', k.pods, now, pod)
redis.call('HSET', k.podver, pod, ARGV[3])
redis.call('HSET', k.podinfo, pod, ARGV[4])
local raised = '0'
if governed then
  redis.call('HINCRBY', k.config, 'q_pods', 1)
  raised = '1'
end
if ARGV[5] ~= '1' then
  redis.call('HSET', k.slots, pod, 0)
  redis.call('ZADD', k.idle, now, pod)
  pod_index(k, pod)
  note_idle(k, now)
  return {'adopted', raised}
end
for n = 1, pc do
  local claim = 'adopted:' .. pod .. ':' .. n
  redis.call('ZADD', k.claims, now + tonumber(cfg[3]), claim)
  claim_set(k, claim, pod)
end
note_due(now + tonumber(cfg[3]))
redis.call('HSET', k.slots, pod, pc)
pod_index(k, pod)
return {'adopted', raised}
