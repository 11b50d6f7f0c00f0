-- lib/served.lua: served counts (SPEC §11.3, max_sessions_per_pod). While the scope
-- has a limit, each slot handed out on a pod counts in k.served when it is taken (a
-- session placed on it, a claim, a hold or a grant; a claim that becomes a session
-- counts once, a claim given back unused counts too). The slot that reaches the limit
-- retires the pod: podver RETIRED, so it takes no new slot, its sessions and holds go
-- on (a claim taken before binds), and it is deleted once it is idle (free_slot notes
-- it due at once).
-- uses: config index

-- served_limit is the scope's max_sessions_per_pod (0: none).
local function served_limit(k)
  return tonumber(redis.call('HGET', k.config, 'max_served') or '0')
end

-- serve counts n slots taken on pod and retires it when it has served the limit.
-- Returns true when the pod takes no more.
local function serve(k, pod, n)
  local limit = served_limit(k)
  if limit == 0 or n <= 0 then
    return false
  end
  if redis.call('HINCRBY', k.served, pod, n) < limit then
    return false
  end
  local v = redis.call('HGET', k.podver, pod)
  if v ~= RETIRED and v ~= DRAINING then
    redis.call('HSET', k.podver, pod, RETIRED)
    pod_index(k, pod)
  end
  return true
end
