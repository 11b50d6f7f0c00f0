-- quota_govern.lua: the scope becomes governed by its tenant's quotas, or stops being
-- so (lib/quota.lua), one dimension at a time. Governing sets the allowance to what the
-- tenant's escrow adopted for it (tenant_grant.lua with adopt, from a read of what the
-- scope holds); a scope governed already keeps its own, and the caller gives the
-- adopted amount back. Ending drops the allowance; the caller drops the scope's grants
-- from the escrow.
-- KEYS: config
-- ARGV[1] pods: the adopted allowance, "" to leave the dimension alone, "-" to end it
-- ARGV[2] sessions: likewise
-- Returns {pods, sessions}: "1" set, "0" governed already (or not ended: it was not
-- governed), "" left alone; {"NO_SCOPE"} for a scope without a published config
local k = scope_keys(KEYS)
if redis.call('HEXISTS', k.config, 'deploy_ver') == 0 then
  return {'NO_SCOPE'}
end
local out = {'', ''}
for i, f in ipairs({'q_pods', 'q_sess'}) do
  local a = ARGV[i]
  if a == '-' then
    out[i] = tostring(redis.call('HDEL', k.config, f))
  elseif a ~= '' then
    out[i] = '0'
    if redis.call('HEXISTS', k.config, f) == 0 then
      redis.call('HSET', k.config, f, a)
      out[i] = '1'
    end
  end
end
return out
