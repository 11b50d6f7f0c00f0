-- pool_target.lua: how many idle pods the scope keeps now (idle_target in
-- lib/demand.lua), and the figures the target came from. Reads only.
-- KEYS: config dstats demand
-- uses: demand
-- ARGV[1] now (ms)  ARGV[2] the sweep's tick (ms)
-- Returns {target, warm_policy, min_idle_pods} for a static scope, and for a demand
-- scope after those {max idle, takes per ms, frees per ms, trend per ms², deploy time
-- (ms), lead time (ms), expected net takes over the lead time}, numbers as strings
-- | {"NO_SCOPE"}
local k = scope_keys(KEYS)
if not redis.call('HGET', k.config, 'deploy_ver') then
  return {'NO_SCOPE'}
end
local target, f = idle_target(k, tonumber(ARGV[1]), tonumber(ARGV[2]))
local r = {tostring(target), f.policy, tostring(f.min_idle)}
if f.policy == 'demand' then
  for _, v in ipairs({f.max_idle, f.takes, f.frees, f.trend, f.deploy, f.lead, f.need}) do
    r[#r + 1] = tostring(v)
  end
end
return r
