-- quota_trim.lua: a governed scope gives back the allowance it does not use
-- (lib/quota.lua): each allowance above what the scope holds (pods and deploys in
-- flight; bound sessions) comes down to it, the sessions' only when asked: a tenant
-- far below its max_sessions lets its scopes keep what they took, so that a new
-- session asks its escrow only at a new peak (quota.go). The caller credits the
-- tenant's escrow with what came off (tenant_credit.lua).
-- KEYS: config pods deploying sessions
-- ARGV[1] "1": the sessions' allowance too
-- Returns {pods off, sessions off, tenant}: "0" in a dimension the scope is not
-- governed in; the tenant its config names ("" for none)
local k = scope_keys(KEYS)
local q = redis.call('HMGET', k.config, 'q_pods', 'q_sess', 'tenant')
local out = {'0', '0', q[3] or ''}
local held = {redis.call('ZCARD', k.pods) + redis.call('ZCARD', k.deploying), redis.call('HLEN', k.sessions)}
for i, f in ipairs({'q_pods', 'q_sess'}) do
  local allowance = tonumber(q[i])
  if allowance and allowance > held[i] and (i == 1 or ARGV[1] == '1') then
    redis.call('HSET', k.config, f, held[i])
    out[i] = tostring(allowance - held[i])
  end
end
return out
