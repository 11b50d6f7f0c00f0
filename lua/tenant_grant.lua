-- tenant_grant.lua: the tenant's escrow grants one of its scopes more allowance
-- (lib/quota.lua): n pods (each requesting cpu_m millicores and memory_b bytes) or n
-- sessions, while what its scopes were granted together stays within the tenant's
-- quotas (max_pods, max_cpu, max_memory; max_sessions). It grants what the scope needs
-- and no more: allowance one scope holds unused is allowance its tenant's other scopes
-- are refused. An adopt grants what a scope holds as it becomes
-- governed, whatever the quotas: it is use already taken.
-- Runs on the tenant's slot; every count is in the escrow HASH: "pods", "cpu_m",
-- "memory_b", "sessions" over all its scopes, "<dim>|<scope>" per scope, and
-- "rate|<pods|sessions>", "rate_t|<…>" the measured release rate (lib/escrow.lua).
-- KEYS: | extra: limits escrow
-- uses: escrow
-- ARGV[1] scope  ARGV[2] "pods"|"sessions"  ARGV[3] n  ARGV[4] cpu_m of one pod
-- ARGV[5] memory_b of one pod  ARGV[6] now (ms)  ARGV[7] "1": adopt
-- Returns {"granted", weight}: the tenant's weight ("" when it has no quotas)
--       | {"refused", quota, limit, use, retry after (ms)}: quota is max_pods,
--         max_cpu, max_memory or max_sessions; use is what its scopes were granted
-- Guarded: the caller's deadline (ms) follows the last ARGV above; lib/guard.lua takes
-- it off and answers {"DEADLINE"}, doing nothing, when Redis runs the call after it.
local k = scope_keys(KEYS)
local scope, dim, n, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[6])
local lim = redis.call('HMGET', k.limits, 'pods', 'cpu_m', 'memory_b', 'sessions', 'weight')
-- checks: {quota, limit, escrow field, amount per unit}
local checks
if dim == 'pods' then
  checks = {{'max_pods', lim[1], 'pods', 1}, {'max_cpu', lim[2], 'cpu_m', tonumber(ARGV[4])},
    {'max_memory', lim[3], 'memory_b', tonumber(ARGV[5])}}
else
  checks = {{'max_sessions', lim[4], 'sessions', 1}}
end
if ARGV[7] ~= '1' then
  for _, c in ipairs(checks) do
    local limit = tonumber(c[2] or '-1')
    local use = tonumber(redis.call('HGET', k.escrow, c[3]) or '0')
    if limit >= 0 and use + n * c[4] > limit then
      -- one release of this dimension is expected in 1 / rate seconds (1 s to 60 s)
      local rate = release_rate(k.escrow, dim, now)
      local retry = 60000
      if rate > 1 / 60 then
        retry = math.max(1000, math.ceil(1000 / rate))
      end
      return {'refused', c[1], string.format('%d', limit), string.format('%d', use), string.format('%d', retry)}
    end
  end
end
for _, c in ipairs(checks) do
  local amount = n * c[4]
  if amount > 0 then
    redis.call('HINCRBY', k.escrow, c[3], string.format('%d', amount))
    redis.call('HINCRBY', k.escrow, c[3] .. '|' .. scope, string.format('%d', amount))
  end
end
return {'granted', lim[5] or ''}
