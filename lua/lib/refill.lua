-- lib/refill.lua: whether a warm refill may start, as pod_placeholder.lua starts one
-- and scope_due.lua counts one still to start as work due at once, and the refill
-- backoff, which holds back any deploy.
-- uses: surplus

-- Refill backoff (SPEC §11.3). deploy_abort.lua counts the failed deploys of the
-- current deploy_ver in k.backoff and sets until to the failure's time + base *
-- 2^(failures - 1), at most the cap. Before until no deploy starts (a route or a hold
-- that would lead one, the warm-pool refill); from then on one at a time: a deploy
-- starts only while none is in flight, and its failure moves until on, so at most one
-- deploy per backoff period tries again. A warm pod and a place in the room of a
-- deploy in flight are taken as ever. A registered pod of the current deploy_ver
-- (pod_register.lua) and a new deploy_ver (scope_publish.lua) delete the key.

-- backoff_refusal is the answer to a deploy the scope's backoff holds back, with the
-- number of deploys in flight, nil when a deploy may start:
-- {"backoff", failures, until (ms), last error, deploys in flight}.
local function backoff_refusal(k, now, deploys)
  local b = redis.call('HMGET', k.backoff, 'failures', 'until', 'error')
  if not b[1] or (now >= tonumber(b[2]) and deploys == 0) then
    return nil
  end
  return {'backoff', b[1], b[2], b[3] or '', tostring(deploys)}
end

-- refill_refusal is nil when a warm refill may start now in a pool that keeps keep
-- warm idle pods (idle_target; at least 1 while a rollout's prewarm runs): fewer warm
-- pods of the current version (its warm deploys in flight counted, a surplus pod not),
-- room under max_pods and the parallel bound, no backoff. Otherwise it is the answer
-- pod_placeholder.lua gives: {"enough"} | {"max_reached"} | {"busy"} | the backoff's.
-- The deploys in flight are read only when the idle pods fall short. A scope governed
-- by its tenant's max_idle_pods keeps at most its allowance q_idle (quota_idle.lua),
-- a rollout's prewarm included.
local function refill_refusal(k, now, keep, max_pods, parallel)
  if prewarm_ver(k, now) then
    keep = math.max(1, keep)
  end
  local q = redis.call('HGET', k.config, 'q_idle')
  if q then
    keep = math.min(keep, tonumber(q))
  end
  local warm = redis.call('ZCARD', k.warm) - redis.call('ZCOUNT', k.surplus, 0, 0)
  if warm >= keep then
    return {'enough'}
  end
  local deploys = redis.call('ZRANGE', k.deploying, 0, -1)
  for _, d in ipairs(deploys) do
    if string.sub(d, -1) == 'w' then
      warm = warm + 1
    end
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
  return backoff_refusal(k, now, #deploys)
end
