-- quota_idle.lua: the scope's share of its tenant's max_idle_pods (SPEC §12.1), the
-- allowance q_idle in its config: a warm refill stops at it (refill_refusal in
-- lib/refill.lua), and the warm idle pods above it are retired now, the longest idle
-- first (the due sweep deletes them at once). The tenants job (idle.go) reads every
-- scope's wish first ("?"), splits the tenant's max_idle_pods over them, then sets
-- each scope's allowance; a tenant without the quota ends it ("-"). A scope published
-- into a tenant with the quota keeps what it has until the next pass ("+").
-- KEYS: config pods podver slots idle dstats due demand free freeprev warm warmprev busy surplus
-- uses: config demand due index
-- ARGV[1] now (ms)  ARGV[2] "?": read the wish | "-": end the allowance | "+": an
--         allowance of the warm idle pods kept, unless it has one | n: set it to n
-- ARGV[3] the sweep's tick (ms), for the demand target (idle_target)
-- Returns for "?" {idle target, warm idle pods kept, allowance ("" for none)}; for "-"
-- and "+" {"0"|"1"} (whether it ended or set one); for n {warm idle pods kept, pods
-- retired}; {"NO_SCOPE"} for a scope without a config.
-- Notes due work (note_due, lib/due.lua): the answer is then {"DUE", due, answer} when
-- it is work due sooner than the scope's due time.
local k = scope_keys(KEYS)
if redis.call('HEXISTS', k.config, 'deploy_ver') == 0 then
  return {'NO_SCOPE'}
end
local now, a = tonumber(ARGV[1]), ARGV[2]
if a == '-' then
  return {tostring(redis.call('HDEL', k.config, 'q_idle'))}
end
local function kept()
  return redis.call('ZCARD', k.warm) - redis.call('ZCOUNT', k.surplus, 0, 0)
end
if a == '?' then
  return {tostring(idle_target(k, now, tonumber(ARGV[3]))), tostring(kept()),
    redis.call('HGET', k.config, 'q_idle') or ''}
end
if a == '+' then
  if redis.call('HEXISTS', k.config, 'q_idle') == 1 then
    return {'0'}
  end
  redis.call('HSET', k.config, 'q_idle', kept())
  return {'1'}
end
local n = tonumber(a)
redis.call('HSET', k.config, 'q_idle', n)
local warm, retired = kept(), 0
while warm > n do
  local pod = redis.call('ZRANGE', k.warm, 0, 0)[1]
  if not pod then
    break
  end
  redis.call('HSET', k.podver, pod, RETIRED)
  pod_index(k, pod)
  retired = retired + 1
  warm = kept()
end
if retired > 0 then
  note_due(now)
end
return {tostring(warm), tostring(retired)}
