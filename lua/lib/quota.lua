-- lib/quota.lua: a governed scope's allowance of its tenant's quotas (SPEC §12.1).
-- A tenant's quotas span its scopes, whose keys sit in other Cluster slots than the
-- tenant's, so no script can read both. The tenant's escrow (tenant_grant.lua, on the
-- tenant's slot) therefore grants each of its scopes an allowance, which the scope keeps
-- in its config HASH: q_pods (pods and deploys in flight together) and q_sess (bound
-- sessions). The scripts that lead a deploy or bind a new session check the allowance
-- in the same step as they take it, so a scope never holds more than its tenant granted
-- it, and the grants never sum above the tenant's quota. A scope whose config has no
-- such field is not governed in that dimension. When the allowance is reached the
-- script refuses with the answer below; the caller (Store.callQuota) asks the escrow
-- for more and runs the script again. Allowance a scope no longer uses goes back to the
-- escrow when the tenants' balance pass trims it (quota_trim.lua).

-- quota_refusal is the answer of a scope whose use (held) has reached its allowance
-- (the config's field, as read by the script; nil: not governed), nil otherwise:
-- {"quota", "pods"|"sessions", held, allowance, tenant, cpu_m, memory_b}: the
-- tenant and what one pod requests, for the escrow's grant.
local function quota_refusal(k, dim, held, allowance)
  local q = tonumber(allowance)
  if not q or held < q then
    return nil
  end
  local t = redis.call('HMGET', k.config, 'tenant', 'cpu_m', 'memory_b')
  return {'quota', dim, tostring(held), tostring(q), t[1] or '', t[2] or '0', t[3] or '0'}
end
