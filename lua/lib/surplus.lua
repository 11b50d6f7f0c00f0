-- lib/surplus.lua: the pods that take new slots when capacity was lowered (surplus
-- pods beyond max_pods) or a prewarm rollout runs (the version it still serves).

-- Lowered capacity. A change that lowers max_pods touches no pod (nor does one that
-- lowers pod_concurrency: handoff.lua): a scope may keep more pods than
-- max_pods. No deploy starts, no pod is adopted and no follower joins a room while pods
-- + deploys are at max_pods or over, and the pods beyond max_pods are surplus
-- (is_surplus): they take no new session, claim, hold or grant, and go when idle
-- (the due sweep deletes an idle surplus pod at once; it is not kept warm, nor counted
-- toward min_idle_pods).

-- The surplus are the current version's pods beyond max_pods: the pods of another
-- deploy_ver count first (they take nothing and go as they empty anyway), then the
-- current version's idle pods, the first to go idle first, then its busy pods, the
-- last registered first: the surplus are those most nearly gone. With s the current
-- version's pods less max_pods, they are the first min(s, idle) of its idle pods and
-- the last s - idle of its busy ones; lib/index.lua keeps them as the key surplus
-- (surplus_sync), and is_surplus reads it.

-- Prewarm rollouts (SPEC §11.3). A class A change under rollout "prewarm"
-- (scope_publish.lua) notes the deploy_ver it replaces in the config HASH
-- (prewarm_ver) and until when its pods may still take new sessions (prewarm_until:
-- the change's time + ready_timeout_s). Until then the pods of that version take new
-- sessions, claims, holds and grants as the current version's do, and the refill
-- deploys max(1, min_idle_pods) pods of the new one (pod_placeholder.lua); the
-- register of the last of those ends the prewarm (pod_register.lua deletes both
-- fields), and so does the time. From then on the old pods drain as under "drain".

-- prewarm_of is the prewarm's version at now from the config's prewarm_ver and
-- prewarm_until (as HMGET reads them), nil when it is over or there is none.
local function prewarm_of(ver, ends, now)
  if ver and now < tonumber(ends) then
    return ver
  end
  return nil
end

-- prewarm_ver is the deploy_ver whose pods take new sessions besides the current one
-- at now, nil when no prewarm runs.
local function prewarm_ver(k, now)
  local p = redis.call('HMGET', k.config, 'prewarm_ver', 'prewarm_until')
  return prewarm_of(p[1], p[2], now)
end

-- serves tells whether a pod of version v takes new slots: one of the current
-- deploy_ver ver, or of prev, the version a prewarm still serves (nil: none).
local function serves(v, ver, prev)
  return v ~= false and v ~= nil and (v == ver or v == prev)
end
