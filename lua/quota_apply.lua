-- quota_apply.lua: a grant of the tenant's escrow (tenant_grant.lua) raises the
-- scope's allowance (lib/quota.lua), when the scope is governed in that dimension.
-- KEYS: config
-- ARGV[1] "pods"|"sessions"  ARGV[2] n
-- Returns 1 when applied, 0 when the scope is not governed in it (the caller gives the
-- grant back).
local k = scope_keys(KEYS)
local field = ARGV[1] == 'pods' and 'q_pods' or 'q_sess'
if redis.call('HEXISTS', k.config, field) == 0 then
  return 0
end
redis.call('HINCRBY', k.config, field, ARGV[2])
return 1
